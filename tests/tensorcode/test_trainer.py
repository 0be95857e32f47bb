"""``Trainer.from_ops``: construction, optimizer ownership, public state, ``step`` and ``fit`` on traced programs.

Losses are in ``test_losses.py``, ``Trainer.from_tool`` and ``capture`` in ``test_trainer_tool.py``,
checkpoints in ``test_checkpoint*.py``.
"""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import tensorcode
from tensorcode import training

torch.set_num_threads(1)


class Encoder(nn.Module):
    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.proj = nn.Linear(4, 6)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):  # (batch, 4) -> (batch, 6)
        return self.drop(torch.tanh(self.proj(x)))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = nn.Linear(6, 3)

    def forward(self, h):  # (batch, 6) -> (batch, 3)
        return self.out(h)


class Recorder(nn.Module):
    """Identity over one linear layer that remembers the exact tensor objects it was called with."""

    def __init__(self):
        super().__init__()
        self.out = nn.Linear(4, 3)
        self._seen: list = []

    def forward(self, x):
        self._seen.append(x)
        return self.out(x)


@tensorcode.external
def lookup(h):
    """A remote service stand-in: an external boundary, recorded and never re-invoked by training."""
    lookup.calls += 1
    return h * 2.0


lookup.calls = 0


def program(seed: int = 0, dropout: float = 0.0) -> dict:
    torch.manual_seed(seed)
    return {"encoder": Encoder(dropout), "head": Head()}


def batch(seed: int = 1, size: int = 5):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(size, 4, generator=generator), torch.randint(0, 3, (size,), generator=generator)


def supervised(operations: dict, seed: int = 1, source: str = "human:test"):
    x, y = batch(seed)
    with tensorcode.trace() as session:
        logits = operations["head"](operations["encoder"](x))
    session.supervise(logits, y, source=source)
    return session


def state(trainer) -> dict:
    """Parameters and optimizer slots, cloned, for before/after comparisons."""
    params = {name: p.detach().clone() for name, p in zip(trainer._names, trainer.parameters, strict=True)}
    slots = copy.deepcopy(trainer.optimizer.state_dict())
    return {"params": params, "optimizer": slots}


def assert_same_state(before: dict, after: dict) -> None:
    assert before["params"].keys() == after["params"].keys()
    for name, value in before["params"].items():
        assert torch.equal(value, after["params"][name]), name
    assert _flat(before["optimizer"]) == _flat(after["optimizer"])


def _flat(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, tuple(value.shape), value.flatten().tolist())
    if isinstance(value, dict):
        return {k: _flat(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_flat(v) for v in value]
    return value


# -- construction --------------------------------------------------------------------------------------------------
def test_bare_constructor_is_refused_naming_both_factories():
    with pytest.raises(TypeError) as info:
        training.Trainer()
    assert "Trainer.from_ops" in str(info.value) and "Trainer.from_tool" in str(info.value)


def test_from_ops_defaults_to_sgd_with_lr_0_01():
    trainer = training.Trainer.from_ops(program())
    assert type(trainer.optimizer) is torch.optim.SGD
    assert [group["lr"] for group in trainer.optimizer.param_groups] == [0.01]


def test_from_ops_lr_sets_the_default_sgd_learning_rate():
    trainer = training.Trainer.from_ops(program(), lr=0.25)
    assert type(trainer.optimizer) is torch.optim.SGD
    assert trainer.optimizer.param_groups[0]["lr"] == 0.25


@pytest.mark.parametrize("lr", [0, -0.1, math.nan, math.inf, True, "0.1"])
def test_from_ops_rejects_invalid_lr(lr):
    with pytest.raises(ValueError, match="lr must be a positive finite number"):
        training.Trainer.from_ops(program(), lr=lr)


def test_from_ops_rejects_empty_operations_and_programs_without_trainable_parameters():
    with pytest.raises(ValueError, match="nonempty mapping"):
        training.Trainer.from_ops({})
    frozen = nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        training.Trainer.from_ops({"frozen": frozen})


def test_trainer_exposes_operations_parameters_and_optimizer():
    operations = program()
    trainer = training.Trainer.from_ops(operations)
    assert trainer.operations == operations
    assert trainer.operations["encoder"] is operations["encoder"]
    expected = [*operations["encoder"].parameters(), *operations["head"].parameters()]
    assert [id(p) for p in trainer.parameters] == [id(p) for p in expected]
    owned = [p for group in trainer.optimizer.param_groups for p in group["params"]]
    assert [id(p) for p in owned] == [id(p) for p in expected]
    assert trainer.tool is None


def test_optimizer_instance_is_used_as_given():
    operations = program()
    params = [*operations["encoder"].parameters(), *operations["head"].parameters()]
    optimizer = torch.optim.Adam(params, lr=0.003)
    trainer = training.Trainer.from_ops(operations, optimizer=optimizer)
    assert trainer.optimizer is optimizer


def test_optimizer_factory_receives_the_deduplicated_trainable_parameters():
    """A parameter shared by two operations is passed once; frozen parameters are not passed."""
    encoder, head = nn.Linear(4, 4), nn.Linear(4, 4)
    head.weight = encoder.weight  # tied
    head.bias.requires_grad_(False)
    received = []

    def factory(params):
        received.append(params)
        return torch.optim.AdamW(params, lr=0.002)

    trainer = training.Trainer.from_ops({"encoder": encoder, "head": head}, optimizer=factory)
    assert len(received) == 1
    assert [id(p) for p in received[0]] == [id(encoder.weight), id(encoder.bias)]
    assert [id(p) for p in trainer.parameters] == [id(encoder.weight), id(encoder.bias)]
    assert type(trainer.optimizer) is torch.optim.AdamW


def test_optimizer_missing_a_parameter_is_refused_naming_it():
    operations = program()
    params = [*operations["encoder"].parameters(), operations["head"].out.weight]
    with pytest.raises(ValueError, match=r"exactly.*missing \['head\.out\.bias'\]"):
        training.Trainer.from_ops(operations, optimizer=torch.optim.SGD(params, lr=0.1))


@pytest.mark.parametrize("extra", ["foreign", "frozen"])
def test_optimizer_owning_a_parameter_outside_the_trainable_set_is_refused(extra):
    operations = program()
    if extra == "frozen":
        operations["head"].out.bias.requires_grad_(False)
        stray = operations["head"].out.bias
    else:
        stray = nn.Linear(2, 2).weight
    params = [p for op in operations.values() for p in op.parameters() if p.requires_grad] + [stray]
    with pytest.raises(ValueError, match=r"exactly.*1 parameter\(s\) not owned"):
        training.Trainer.from_ops(operations, optimizer=lambda ps: torch.optim.SGD(params, lr=0.1))


def test_optimizer_holding_a_shared_parameter_twice_is_refused():
    encoder, head = nn.Linear(4, 4), nn.Linear(4, 4)
    head.weight = encoder.weight
    twice = [encoder.weight, encoder.bias, head.weight, head.bias]  # head.weight is encoder.weight
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch itself only warns about duplicates within a group
        optimizer = torch.optim.SGD(twice, lr=0.1)
    with pytest.raises(ValueError, match="shared parameter must appear once"):
        training.Trainer.from_ops({"encoder": encoder, "head": head}, optimizer=optimizer)


def test_optimizer_must_be_an_optimizer_or_a_factory_returning_one():
    with pytest.raises(TypeError, match="torch.optim.Optimizer or a factory"):
        training.Trainer.from_ops(program(), optimizer="sgd")
    with pytest.raises(TypeError, match="factory must return a torch.optim.Optimizer"):
        training.Trainer.from_ops(program(), optimizer=lambda ps: list(ps))


def test_custom_losses_must_be_named_callables_outside_the_builtins():
    with pytest.raises(ValueError, match="built in"):
        training.Trainer.from_ops(program(), losses={"mse": lambda o, t: o.sum()})
    with pytest.raises(ValueError, match="nonempty names to callables"):
        training.Trainer.from_ops(program(), losses={"hinge": 3})
    with pytest.raises(ValueError, match="nonempty names to callables"):
        training.Trainer.from_ops(program(), losses={"": lambda o, t: o.sum()})


def test_steps_is_settable_and_validated():
    trainer = training.Trainer.from_ops(program())
    assert trainer.steps == 0
    trainer.steps = 7
    assert trainer.steps == 7
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="steps must be a nonnegative integer"):
            trainer.steps = bad
    assert trainer.steps == 7


def test_progress_is_a_settable_json_mapping():
    trainer = training.Trainer.from_ops(program())
    assert trainer.progress == {}
    cursor = {"next_example": 43, "files": ["a.json"], "ratio": 0.5}
    trainer.progress = cursor
    assert trainer.progress == cursor
    cursor["files"].append("b.json")  # the trainer holds its own JSON copy
    assert trainer.progress["files"] == ["a.json"]


@pytest.mark.parametrize("bad", [{"when": object()}, {"loss": math.nan}, [("a", 1)], "x"])
def test_progress_refuses_non_json_values_and_keeps_the_previous_mapping(bad):
    trainer = training.Trainer.from_ops(program())
    trainer.progress = {"epoch": 2}
    with pytest.raises(ValueError, match="progress must be"):
        trainer.progress = bad
    assert trainer.progress == {"epoch": 2}


def test_from_ops_leaves_module_modes_alone():
    operations = program()
    operations["encoder"].eval()
    operations["head"].train()
    training.Trainer.from_ops(operations)
    assert not operations["encoder"].training and not operations["encoder"].drop.training
    assert operations["head"].training


def test_capture_on_an_operations_trainer_points_to_trace_and_supervise():
    trainer = training.Trainer.from_ops(program())
    x, y = batch()
    with pytest.raises(TypeError, match=r"trace\(\).*supervise\("):
        trainer.capture(x, y, source="human:1")


# -- step ----------------------------------------------------------------------------------------------------------
def test_step_performs_one_sgd_update_returns_a_float_and_counts_it():
    operations = program()
    reference = copy.deepcopy(operations)
    trainer = training.Trainer.from_ops(operations, lr=0.1)
    session = supervised(operations)
    x, y = batch()
    expected_loss = F.cross_entropy(reference["head"](reference["encoder"](x)), y)
    expected_loss.backward()
    loss = trainer.step(session)
    assert type(loss) is float
    assert loss == pytest.approx(expected_loss.item(), rel=1e-6)
    assert trainer.steps == 1
    for name in ("encoder", "head"):
        for p, q in zip(operations[name].parameters(), reference[name].parameters(), strict=True):
            torch.testing.assert_close(p.detach(), (q - 0.1 * q.grad).detach())


def test_step_averages_the_explicit_losses_of_the_experience():
    operations = program()
    reference = copy.deepcopy(operations)
    trainer = training.Trainer.from_ops(operations, lr=0.1)
    x, y = batch()
    other = torch.randn(5, 3, generator=torch.Generator().manual_seed(9))
    with tensorcode.trace() as session:
        hidden = operations["encoder"](x)
        logits = operations["head"](hidden)
    session.supervise(logits, y, source="human:labels")
    session.supervise(logits, other, loss="mse", source="human:scores")
    logits_ref = reference["head"](reference["encoder"](x))
    first, second = F.cross_entropy(logits_ref, y), F.mse_loss(logits_ref, other)
    ((first + second) / 2).backward()
    assert trainer.step(session) == pytest.approx((first.item() + second.item()) / 2, rel=1e-6)
    for name in ("encoder", "head"):
        for p, q in zip(operations[name].parameters(), reference[name].parameters(), strict=True):
            torch.testing.assert_close(p.detach(), (q - 0.1 * q.grad).detach())


def test_step_replays_each_supervised_output_separately():
    """Two supervisions of one dropout output see two different dropout samples in one step."""
    operations = program(dropout=0.5)
    seen = []

    def recording(output, target):
        seen.append(output.detach().clone())
        return F.mse_loss(output, target)

    trainer = training.Trainer.from_ops(operations, losses={"recording": recording})
    x, _ = batch()
    with tensorcode.trace() as session:
        hidden = operations["encoder"](x)
    session.supervise(hidden, torch.zeros(5, 6), loss="recording", source="human:a")
    session.supervise(hidden, torch.ones(5, 6), loss="recording", source="human:b")
    trainer.step(session)
    assert len(seen) == 2
    assert not torch.equal(seen[0], seen[1])
    assert trainer.steps == 1


def test_step_uses_recorded_boundaries_as_constants():
    """The external call is not re-invoked, and no gradient crosses it back to the encoder."""
    operations = {**program(), "lookup": lookup}
    trainer = training.Trainer.from_ops(operations, lr=0.5)
    x, y = batch()
    with tensorcode.trace() as session:
        logits = operations["head"](lookup(operations["encoder"](x)))
    session.supervise(logits, y, source="human:1")
    calls = lookup.calls
    encoder_before = [p.detach().clone() for p in operations["encoder"].parameters()]
    head_before = [p.detach().clone() for p in operations["head"].parameters()]
    with torch.no_grad():
        operations["encoder"].proj.weight.add_(1.0)  # a changed encoder cannot change the recorded boundary
        encoder_before[0].add_(1.0)
    trainer.step(session)
    trainer.step(session)
    assert lookup.calls == calls
    assert all(p.grad is None for p in operations["encoder"].parameters())
    for p, before in zip(operations["encoder"].parameters(), encoder_before, strict=True):
        assert torch.equal(p.detach(), before)
    head_after = [p.detach() for p in operations["head"].parameters()]
    assert not all(torch.equal(a, b) for a, b in zip(head_after, head_before, strict=True))


def test_fit_returns_one_loss_per_session_update():
    operations = program()
    twin = copy.deepcopy(operations)
    sessions = [supervised(operations, seed=s) for s in (1, 2, 3)]
    twin_sessions = [supervised(twin, seed=s) for s in (1, 2, 3)]
    trainer = training.Trainer.from_ops(operations, lr=0.1)
    losses = trainer.fit(iter(sessions), epochs=2)
    assert len(losses) == 6 and all(type(x) is float for x in losses)
    assert trainer.steps == 6
    twin_trainer = training.Trainer.from_ops(twin, lr=0.1)
    assert losses == [twin_trainer.step(s) for _ in range(2) for s in twin_sessions]


@pytest.mark.parametrize("epochs", [0, -1, 1.0, True])
def test_fit_rejects_invalid_epochs(epochs):
    trainer = training.Trainer.from_ops(program())
    with pytest.raises(ValueError, match="epochs must be a positive integer"):
        trainer.fit([supervised(trainer.operations)], epochs=epochs)
    assert trainer.steps == 0


def test_step_rejects_a_non_trace_and_an_unsupervised_trace():
    trainer = training.Trainer.from_ops(program())
    with pytest.raises(TypeError, match="tensorcode.Trace"):
        trainer.step([1, 2])
    with tensorcode.trace() as session:
        trainer.operations["head"](trainer.operations["encoder"](batch()[0]))
    with pytest.raises(ValueError, match="no supervision records"):
        trainer.step(session)


def test_loaded_experience_trains_identically_to_the_live_session(tmp_path):
    """Same initial weights, same random state: the file and the live trace give the same loss and update."""
    live_ops, file_ops = program(seed=3, dropout=0.3), program(seed=3, dropout=0.3)
    session = supervised(live_ops, source="human:review-1")
    session.save(tmp_path / "experience.json", operations=live_ops, release=True)
    loaded = training.load_experience(tmp_path / "experience.json", operations=file_ops)
    live = training.Trainer.from_ops(live_ops, optimizer=lambda ps: torch.optim.Adam(ps, lr=0.01))
    restored = training.Trainer.from_ops(file_ops, optimizer=lambda ps: torch.optim.Adam(ps, lr=0.01))
    for seed in (10, 11):
        torch.manual_seed(seed)
        live_loss = live.step(session)
        torch.manual_seed(seed)
        assert restored.step(loaded) == live_loss
    for p, q in zip(live.parameters, restored.parameters, strict=True):
        assert torch.equal(p, q)


def test_step_hands_operations_and_custom_losses_copies_they_cannot_change_the_record_through(tmp_path):
    """An operation and a custom loss that write to what they are given leave the stored experience as it was."""
    recorder = Recorder()

    def loss(output, target):
        labels = target.clone()
        target.fill_(0)  # a careless custom loss
        return F.cross_entropy(output, labels)

    x, y = batch()
    with tensorcode.trace() as session:
        logits = recorder(x)
    session.supervise(logits, y, loss="seen", source="human:1")
    session.save(tmp_path / "e.json", operations={"recorder": recorder}, release=True)
    loaded = training.load_experience(tmp_path / "e.json", operations={"recorder": recorder})
    trainer = training.Trainer.from_ops({"recorder": recorder}, losses={"seen": loss})
    trainer.step(loaded)
    recorder._seen[-1].mul_(0)  # the operation's argument, changed after the fact
    assert torch.equal(loaded.value(loaded.inputs[0]), x)
    assert torch.equal(loaded.supervisions[0].target, y)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="moving restored tensors to a GPU needs CUDA")
def test_cuda_step_moves_restored_inputs_targets_and_boundaries_to_the_parameters(tmp_path):
    operations = {**program(), "lookup": lookup}
    session = supervised_through_lookup(operations)
    session.save(tmp_path / "e.json", operations=operations, release=True)
    for name in ("encoder", "head"):
        operations[name].to("cuda")
    loaded = training.load_experience(tmp_path / "e.json", operations=operations)
    assert loaded.value(loaded.inputs[0]).device.type == "cpu"
    trainer = training.Trainer.from_ops(operations, lr=0.1)
    assert math.isfinite(trainer.step(loaded))
    assert trainer.device.type == "cuda"
    assert all(p.grad is not None and p.grad.device.type == "cuda" for p in operations["head"].parameters())


def supervised_through_lookup(operations):
    x, y = batch()
    with tensorcode.trace() as session:
        logits = operations["head"](lookup(operations["encoder"](x)))
    session.supervise(logits, y, source="human:1")
    return session


# -- refusals before any parameter changes ----------------------------------------------------------------------
@pytest.fixture
def adam_trainer():
    """A trainer that has already taken one Adam step, so optimizer slots exist and must stay untouched."""
    operations = {**program(dropout=0.2), "lookup": lookup}
    trainer = training.Trainer.from_ops(
        operations,
        optimizer=lambda ps: torch.optim.Adam(ps, lr=0.01),
        losses={"nan_gradient": nan_gradient, "detached": detached, "inf": lambda o, t: o.sum() * math.inf},
    )
    trainer.step(supervised(operations))
    trainer.optimizer.zero_grad(set_to_none=True)
    return trainer


def nan_gradient(output, target):
    """A finite loss (0) whose gradient is 0 * inf = nan."""
    return ((output - output.detach()) ** 2).sum().sqrt()


LEAF = torch.zeros((), requires_grad=True)


def detached(output, target):
    """Differentiable, but not with respect to any parameter of the trainer."""
    return (output.detach() ** 2).mean() + LEAF


def assert_refused_without_change(trainer, session, match):
    before, steps = state(trainer), trainer.steps
    with pytest.raises(ValueError, match=match):
        trainer.step(session)
    assert_same_state(before, state(trainer))
    assert trainer.steps == steps
    assert all(p.grad is None for p in trainer.parameters)


def test_output_of_an_external_boundary_alone_is_refused_as_nondifferentiable(adam_trainer):
    ops = adam_trainer.operations
    x, y = batch()
    with tensorcode.trace() as session:
        scores = ops["lookup"](ops["head"](ops["encoder"](x)))
    session.supervise(scores, y, source="human:1")
    assert_refused_without_change(adam_trainer, session, "not differentiable")


def test_loss_disconnected_from_the_parameters_is_refused(adam_trainer):
    ops = adam_trainer.operations
    x, y = batch()
    with tensorcode.trace() as session:
        logits = ops["head"](ops["encoder"](x))
    session.supervise(logits, y, loss="detached", source="human:1")
    assert_refused_without_change(adam_trainer, session, "disconnected")


def test_output_of_an_unowned_module_is_refused_as_disconnected(adam_trainer):
    stranger = nn.Linear(4, 3)
    x, y = batch()
    with tensorcode.trace() as session:
        logits = stranger(x)
    session.supervise(logits, y, source="human:1")
    assert_refused_without_change(adam_trainer, session, "disconnected")


def test_non_finite_loss_is_refused(adam_trainer):
    ops = adam_trainer.operations
    x, _ = batch()
    with tensorcode.trace() as session:
        logits = ops["head"](ops["encoder"](x))
    session.supervise(logits, torch.full((5, 3), math.inf), loss="mse", source="human:1")
    assert_refused_without_change(adam_trainer, session, "not finite")


def test_non_finite_gradient_is_refused(adam_trainer):
    ops = adam_trainer.operations
    x, y = batch()
    with tensorcode.trace() as session:
        logits = ops["head"](ops["encoder"](x))
    session.supervise(logits, y, loss="nan_gradient", source="human:1")
    assert_refused_without_change(adam_trainer, session, "non-finite gradients")


def test_a_later_bad_supervision_leaves_no_gradient_from_earlier_ones(adam_trainer):
    ops = adam_trainer.operations
    x, y = batch()
    with tensorcode.trace() as session:
        logits = ops["head"](ops["encoder"](x))
    session.supervise(logits, y, source="human:good")
    session.supervise(logits, y, loss="inf", source="human:bad")
    assert_refused_without_change(adam_trainer, session, "not finite")


def test_unknown_loss_is_refused_naming_the_registered_ones(adam_trainer):
    ops = adam_trainer.operations
    x, y = batch()
    with tensorcode.trace() as session:
        logits = ops["head"](ops["encoder"](x))
    session.supervise(logits, y, loss="hinge", source="human:1")
    assert_refused_without_change(adam_trainer, session, r"unknown loss 'hinge'.*'cross_entropy'")



def test_fit_refuses_non_finite_gradients_before_any_parameter_changes(adam_trainer):
    ops = adam_trainer.operations
    x, y = batch()
    with tensorcode.trace() as session:
        logits = ops["head"](ops["encoder"](x))
    session.supervise(logits, y, loss="nan_gradient", source="human:1")
    before, steps = state(adam_trainer), adam_trainer.steps
    with pytest.raises(ValueError, match="non-finite gradients"):
        adam_trainer.fit([session])
    assert_same_state(before, state(adam_trainer))
    assert adam_trainer.steps == steps and all(p.grad is None for p in adam_trainer.parameters)


def test_fit_checks_every_session_before_the_first_update(adam_trainer):
    ops = adam_trainer.operations
    x, y = batch()
    with tensorcode.trace() as session:
        logits = ops["head"](ops["encoder"](x))
    session.supervise(logits, y, loss="hinge", source="human:1")
    before, steps = state(adam_trainer), adam_trainer.steps
    with pytest.raises(ValueError, match="unknown loss 'hinge'"):
        adam_trainer.fit([supervised(ops), session])
    assert_same_state(before, state(adam_trainer))
    assert adam_trainer.steps == steps


def test_an_optimizer_with_its_own_zero_grad_is_still_asked_to_zero():
    """The trainer drops gradients itself only for optimizers that keep torch's zero_grad."""

    class Counting(torch.optim.SGD):
        calls = 0

        def zero_grad(self, set_to_none: bool = True) -> None:
            type(self).calls += 1
            super().zero_grad(set_to_none=set_to_none)

    operations = program()
    trainer = training.Trainer.from_ops(operations, optimizer=lambda ps: Counting(ps, lr=0.1))
    trainer.step(supervised(operations))
    assert Counting.calls == 1
    assert all(p.grad is not None for p in trainer.parameters)  # kept after the update, as before

def test_huge_but_finite_gradients_are_not_mistaken_for_non_finite_ones():
    """Their norm overflows float32; the elementwise check still accepts them."""
    operations = program()
    trainer = training.Trainer.from_ops(operations, lr=1e-33, losses={"huge": lambda o, t: o.sum() * 1e30})
    x, _ = batch()
    with tensorcode.trace() as session:
        logits = operations["head"](operations["encoder"](x))
    session.supervise(logits, 0, loss="huge", source="human:1")
    assert math.isfinite(trainer.step(session))
    assert trainer.steps == 1
    assert all(bool(torch.isfinite(p).all()) for p in trainer.parameters)
    assert math.isinf(torch.linalg.vector_norm(operations["head"].out.weight.grad).item())


def test_sparse_embedding_gradients_are_checked_and_applied():
    embed = nn.EmbeddingBag(10, 3, mode="sum", sparse=True)
    head = nn.Linear(3, 2)
    trainer = training.Trainer.from_ops({"embed": embed, "head": head}, lr=0.1, losses={"nan": nan_gradient})
    ids = torch.tensor([[1, 2], [3, 3]])
    with tensorcode.trace() as session:
        logits = head(embed(ids))
    session.supervise(logits, torch.tensor([0, 1]), source="human:1")
    before = embed.weight.detach().clone()
    assert math.isfinite(trainer.step(session))
    changed = (embed.weight.detach() != before).any(dim=1)
    assert changed.tolist() == [False, True, True, True] + [False] * 6

    with tensorcode.trace() as session:
        embedded = embed(ids)
    session.supervise(embedded, 0, loss="nan", source="human:1")
    before = embed.weight.detach().clone()
    with pytest.raises(ValueError, match="non-finite gradients"):
        trainer.step(session)
    assert torch.equal(embed.weight, before)
