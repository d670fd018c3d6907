"""Node types whose own code fails (as a buggy plugin's would), registered for one test and then
taken out of the table again (and of the asset model's union)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from runtime import nodes
from runtime.nodes import END, NODE_TYPES, NodeBase, NodeType, register


class RunRaises(NodeBase):
    type: Literal["RunRaises"] = "RunRaises"
    default_exit: str = END

    def exits(self):
        return {"default_exit": self.default_exit}

    def run(self, run):
        run.set_variable("mood", "changed")  # rolled back with the turn
        raise RuntimeError("the plugin's run broke")


class RunExits(RunRaises):
    type: Literal["RunExits"] = "RunExits"

    def run(self, run):
        raise SystemExit(3)


class CheckRaises(NodeBase):
    type: Literal["CheckRaises"] = "CheckRaises"
    default_exit: str = END

    def exits(self):
        return {"default_exit": self.default_exit}

    def check(self, checks):
        raise ValueError("the plugin's check broke")


class GraphCheckExits(CheckRaises):
    type: Literal["GraphCheckExits"] = "GraphCheckExits"

    def check(self, checks):
        pass

    def check_in_graph(self, checks):
        raise SystemExit(3)


class ExitsRaise(NodeBase):
    type: Literal["ExitsRaise"] = "ExitsRaise"

    def exits(self):
        raise KeyError("the plugin's exits broke")

    def run(self, run):
        return "default_exit"


class ModelUsesRaise(CheckRaises):
    """A node whose model_uses() (what the memory estimate sizes) raises."""

    type: Literal["ModelUsesRaise"] = "ModelUsesRaise"

    def model_uses(self):
        raise RuntimeError("the plugin's model_uses broke")

    def check(self, checks):
        pass


class DescribesBadly(CheckRaises):
    """A node whose descriptive methods (asked by the canvas, the properties dock, validation) raise."""

    type: Literal["DescribesBadly"] = "DescribesBadly"

    def check(self, checks):
        pass

    def speaks(self):
        raise RuntimeError("speaks broke")

    def uses_model(self):
        raise RuntimeError("uses_model broke")

    def history_budget(self, model_context):
        raise RuntimeError("history_budget broke")

    def field_limits(self):
        raise RuntimeError("field_limits broke")


class ViewExits(CheckRaises):
    """A node whose editor description exits the program when it is imported."""

    type: Literal["ViewExits"] = "ViewExits"

    def check(self, checks):
        pass


FAILING = (RunRaises, RunExits, CheckRaises, GraphCheckExits, ExitsRaise, ModelUsesRaise)


@contextmanager
def registered(*models: type[NodeBase]) -> Iterator[None]:
    models = models or FAILING
    for model in models:
        register(NodeType(model, package="parley-failing"))
    try:
        yield
    finally:
        for model in models:
            entry = NODE_TYPES.pop(model.model_fields["type"].default)
        for callback in nodes._SUBSCRIBERS:  # the asset model's union is built again without them
            callback(entry)
