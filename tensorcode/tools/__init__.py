"""Owned tools: small PyTorch models that reviewers can teach.

Import them from their modules: ``tensorcode.tools.investigator.Investigator``,
``tensorcode.tools.decision.Decision``, ``tensorcode.tools.planner.Planner``, ``tensorcode.tools.scene.Scene``,
``tensorcode.tools.chatbot.Chatbot``. Needs the ``tools`` extra (torch, safetensors).
"""
