"""Operation fingerprints: an experience loads only into operations of the same qualified type, replay capability,
configuration and tensor-state structure (names, shapes, dtypes, gradient flags), never compared on learned
values, so updated weights load and a changed label order or shape does not."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import tensorcode
from tensorcode import ExperienceError, training
from tensorcode._fingerprint import describe
from tensorcode.tools._base import CapturePlan, Tool

torch.set_num_threads(1)


def double(x):
    return x * 2


def halve(x):
    return x / 2


class Classifier(nn.Module):
    """A head with an explicit, authoritative configuration: its label order."""

    def __init__(self, labels=("cat", "dog", "bird"), width=4):
        super().__init__()
        self.labels = list(labels)
        self.proj = nn.Linear(width, len(labels))
        self.policy = object()  # opaque, but configuration() is authoritative, so it is never inspected

    def configuration(self):
        return {"labels": self.labels}

    def forward(self, x):  # (batch, width) -> (batch, labels)
        return self.proj(x)


class Subclassifier(Classifier):
    pass


class Block(nn.Module):
    """No configuration(): described by the conservative fallback of its public JSON behaviour fields."""

    def __init__(self, p=0.1, activation=None):
        super().__init__()
        self.layer = nn.Linear(4, 4)
        self.drop = nn.Dropout(p)
        self.activation = activation or double
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x):  # (batch, 4) -> (batch, 4)
        return self.drop(self.activation(self.layer(x))) * self.scale


def capture(op, x=None):
    with tensorcode.trace() as session:
        out = op(torch.ones(2, 4) if x is None else x)
    session.supervise(out, torch.zeros(2, dtype=torch.long), source="test")
    return session


def save(op, path, name="op", x=None):
    capture(op, x).save(path, operations={name: op})


def refused(path, op, name="op") -> str:
    with pytest.raises(ExperienceError, match=f"fingerprint mismatch for binding '{name}'") as info:
        training.load_experience(path, operations={name: op})
    return str(info.value)


# -- what loads ----------------------------------------------------------------------------------------------------
def test_updated_weights_load_and_replay_uses_them(tmp_path):
    torch.manual_seed(0)
    head = Classifier()
    path = tmp_path / "experience.json"
    save(head, path)
    with torch.no_grad():
        head.proj.weight.mul_(-3).add_(1)
        head.proj.bias.fill_(0.5)
    loaded = training.load_experience(path, operations={"op": head})
    assert torch.equal(loaded.replay(loaded.supervisions[0].output), head(torch.ones(2, 4)))


def test_a_freshly_constructed_operation_with_other_weights_loads(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "experience.json"
    save(Block(), path)
    torch.manual_seed(1)
    other = Block().eval()
    loaded = training.load_experience(path, operations={"op": other})
    assert loaded.calls[0].op is other
    assert torch.equal(loaded.replay(loaded.calls[0].output), other(torch.ones(2, 4)))


def test_learned_values_are_not_part_of_the_fingerprint(tmp_path):
    torch.manual_seed(0)
    big = nn.Linear(256, 256)
    torch.manual_seed(1)
    assert describe(big) == describe(nn.Linear(256, 256))
    path = tmp_path / "experience.json"
    save(big, path, x=torch.ones(1, 256))
    assert path.stat().st_size < 4096  # 256 KiB of weights are not in the file


def test_training_mode_is_not_part_of_the_fingerprint(tmp_path):
    block = Block()
    path = tmp_path / "experience.json"
    save(block.eval(), path)
    training.load_experience(path, operations={"op": block.train()})


# -- what is refused -----------------------------------------------------------------------------------------------
def test_changed_label_order_is_refused(tmp_path):
    path = tmp_path / "experience.json"
    save(Classifier(["cat", "dog", "bird"]), path)
    message = refused(path, Classifier(["dog", "cat", "bird"]))
    assert "configuration.labels[0]" in message


def test_changed_label_count_is_refused(tmp_path):
    path = tmp_path / "experience.json"
    save(Classifier(["cat", "dog", "bird"]), path)
    assert "configuration.labels (length 3 != 2)" in refused(path, Classifier(["cat", "dog"]))


def test_changed_parameter_shape_is_refused_even_under_an_authoritative_configuration(tmp_path):
    path = tmp_path / "experience.json"
    save(Classifier(width=4), path)
    with torch.no_grad():
        message = refused(path, Classifier(width=5))
    assert "state[0][1]" in message  # proj.weight's shape


def test_changed_dtype_is_refused(tmp_path):
    path = tmp_path / "experience.json"
    save(nn.Linear(4, 3), path)
    assert "state[0][2]" in refused(path, nn.Linear(4, 3).double())


def test_changed_gradient_flag_is_refused(tmp_path):
    path = tmp_path / "experience.json"
    save(nn.Linear(4, 3), path)
    frozen = nn.Linear(4, 3)
    frozen.weight.requires_grad_(False)
    assert "state[0][3]" in refused(path, frozen)


def test_changed_parameter_names_are_refused(tmp_path):
    path = tmp_path / "experience.json"
    save(nn.Sequential(nn.Linear(4, 3)), path)
    renamed = nn.Sequential()
    renamed.add_module("head", nn.Linear(4, 3))
    assert "fingerprint mismatch" in refused(path, renamed)


def test_added_buffer_is_refused(tmp_path):
    path = tmp_path / "experience.json"
    save(nn.Linear(4, 3), path)
    grown = nn.Linear(4, 3)
    grown.register_buffer("mask", torch.ones(3))
    assert "state (length 2 != 3)" in refused(path, grown)


def test_changed_buffer_shape_is_refused(tmp_path):
    path = tmp_path / "experience.json"
    save(Block(), path)
    other = Block()
    other.scale = torch.ones(5)
    assert "state[2][1][0]" in refused(path, other)  # parameters first, then buffers


def test_other_qualified_type_is_refused(tmp_path):
    path = tmp_path / "experience.json"
    save(Classifier(), path)
    assert "type differs" in refused(path, Subclassifier())


def test_replay_capability_is_part_of_the_fingerprint(tmp_path):
    path = tmp_path / "experience.json"
    save(Classifier(), path)
    external = Classifier()
    external.tensorcode_external = True
    assert "replay differs" in refused(path, external)


def test_pure_and_external_declarations_of_one_function_do_not_match(tmp_path):
    pure = tensorcode.operation(double, configuration={"op": "double"})
    path = tmp_path / "experience.json"
    save(pure, path)
    assert "replay differs" in refused(path, tensorcode.external(double, configuration={"op": "double"}))


# -- explicit configuration and the conservative fallback ---------------------------------------------------------
def test_explicit_configuration_is_authoritative(tmp_path):
    """Attributes outside configuration() are neither inspected (the opaque ``policy``) nor compared."""
    path = tmp_path / "experience.json"
    save(Classifier(), path)
    other = Classifier()
    other.temperature = 2.0
    other.policy = lambda x: x
    training.load_experience(path, operations={"op": other})
    assert describe(other)["configuration"] == {"labels": ["cat", "dog", "bird"]}


def test_fallback_describes_public_behaviour_fields_of_every_submodule(tmp_path):
    fingerprint = describe(Block(p=0.25))
    assert fingerprint["type"] == f"{__name__}.Block"
    assert fingerprint["configuration"]["drop"]["fields"]["p"] == 0.25
    assert fingerprint["configuration"]["layer"]["fields"]["out_features"] == 4
    assert fingerprint["configuration"][""]["fields"]["activation"] == f"function:{__name__}.double"
    json.dumps(fingerprint, allow_nan=False)
    path = tmp_path / "experience.json"
    save(Block(p=0.25), path)
    assert "configuration.drop.fields.p" in refused(path, Block(p=0.5))


def test_fallback_compares_named_functions(tmp_path):
    path = tmp_path / "experience.json"
    save(Block(activation=double), path)
    assert "activation" in refused(path, Block(activation=halve))


def test_fallback_refuses_opaque_behaviour_state(tmp_path):
    class Opaque(nn.Linear):
        pass

    module = Opaque(4, 3)
    module.policy = object()
    path = tmp_path / "experience.json"
    with pytest.raises(ExperienceError, match=r"binding 'op'.*attribute 'policy' holds opaque behaviour state"):
        save(module, path)
    assert not path.exists()


@pytest.mark.parametrize("make", [lambda: (lambda x: x), lambda: (lambda y: (lambda x: x + y))(1)],
                         ids=["lambda", "closure"])
def test_fallback_refuses_lambdas_and_closures(tmp_path, make):
    block = Block(activation=make())
    with pytest.raises(ExperienceError, match="attribute 'activation' is a lambda or closure; give the module a "
                                              r"configuration\(\) method"):
        save(block, tmp_path / "experience.json")


def test_configuration_must_be_json_safe(tmp_path):
    class Bad(Classifier):
        def configuration(self):
            return {"labels": self.labels, "tokenizer": object()}

    with pytest.raises(ExperienceError, match="binding 'op': configuration is not JSON-safe"):
        save(Bad(), tmp_path / "experience.json")


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_configuration_must_be_finite(tmp_path, value):
    class Bad(Classifier):
        def configuration(self):
            return {"labels": self.labels, "temperature": value}

    path = tmp_path / "experience.json"
    with pytest.raises(ExperienceError):
        save(Bad(), path)
    assert not path.exists()


def test_configuration_keys_must_be_strings(tmp_path):
    class Bad(Classifier):
        def configuration(self):
            return {1: "one"}

    with pytest.raises(ExperienceError, match="non-string keys"):
        save(Bad(), tmp_path / "experience.json")


def test_plain_function_operation_is_described_by_its_qualified_name(tmp_path):
    op = tensorcode.operation(double)
    assert describe(op) == {
        "type": "tensorcode.Operation", "replay": "pure", "configuration": {"function": f"{__name__}.double"},
        "state": [],
    }
    path = tmp_path / "experience.json"
    save(op, path)
    assert "configuration.function" in refused(path, tensorcode.operation(halve))


def test_closure_operation_needs_explicit_configuration(tmp_path):
    scale = 3.0

    def scaled(x):
        return x * scale

    with pytest.raises(ExperienceError, match="closure or lambda whose captured state cannot be described"):
        save(tensorcode.operation(scaled), tmp_path / "a.json")
    declared = tensorcode.operation(scaled, configuration={"scale": scale})
    save(declared, tmp_path / "b.json")
    changed = tensorcode.operation(scaled, configuration={"scale": 4.0})
    assert "configuration.scale" in refused(tmp_path / "b.json", changed)


def test_stateful_callable_operation_needs_explicit_configuration(tmp_path):
    class Scaler:
        def __call__(self, x):
            return x * 2

    with pytest.raises(ExperienceError, match=r"wraps a stateful callable \(.*Scaler\)"):
        save(tensorcode.operation(Scaler()), tmp_path / "a.json")
    save(tensorcode.operation(Scaler(), configuration={"factor": 2}), tmp_path / "b.json")


def test_non_operation_binding_is_refused(tmp_path):
    with tensorcode.trace() as session:
        tensorcode.operation(double)(torch.ones(1))
    op = session.calls[0].op
    with pytest.raises(ExperienceError, match="is not an operation"):
        training.load_experience(_saved(session, op, tmp_path), operations={"op": print})


def _saved(session, op, tmp_path):
    path = tmp_path / "experience.json"
    session.save(path, operations={"op": op})
    return path


# -- owned vector tools --------------------------------------------------------------------------------------------
class Labeller(Tool):
    FIELDS = {"labels": ["yes", "no", "maybe"], "dim": 4, "seed": 0}
    NAME = "labeller"

    def build(self):
        self.head = nn.Linear(self._configuration["dim"], len(self._configuration["labels"]))

    def objective(self, batch):  # (batch, dim) -> (batch, labels)
        return self.head(batch)

    def losses(self):
        return {}

    def plan_capture(self, inputs, targets):
        return CapturePlan(self.NAME, torch.as_tensor(inputs, dtype=torch.float32), torch.as_tensor(targets),
                           "cross_entropy", len(targets))


def tool_experience(tool, path):
    trainer = training.Trainer.from_tool(tool, lr=0.1)
    trainer.capture(torch.ones(2, tool.configuration()["dim"]), [0, 2], source="test").save(
        path, operations=trainer.operations
    )
    return trainer


def test_trained_tool_loads_its_experience_and_reordered_labels_do_not(tmp_path):
    path = tmp_path / "experience.json"
    trainer = tool_experience(Labeller(), path)
    trainer.step(training.load_experience(path, operations=trainer.operations))  # weights change
    training.load_experience(path, operations=trainer.operations)
    reordered = training.Trainer.from_tool(Labeller(labels=["no", "yes", "maybe"]))
    with pytest.raises(ExperienceError, match=r"'labeller': configuration\.configuration\.labels\[0\]"):
        training.load_experience(path, operations=reordered.operations)


def test_tool_with_another_space_does_not_load(tmp_path):
    path = tmp_path / "experience.json"
    tool_experience(Labeller(), path)
    wider = training.Trainer.from_tool(Labeller(dim=6))
    with pytest.raises(ExperienceError, match=r"'labeller': configuration\.configuration\.dim"):
        training.load_experience(path, operations=wider.operations)
