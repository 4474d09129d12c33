"""pardnn.keras.matching in this process, on a one-layer Keras model: a build whose
layers are the plan's and whose variables come in the plan's order with the plan's
shapes and dtypes is still refused, in one line naming the variable, when a
variable's key (its layer's path and its name in the layer, pardnn.keras.keys) is not
the plan's; the planned build itself passes."""

import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import keras
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.keras.keys import layer_summary
from pardnn.keras.matching import Created, Matcher, PlannedVariable, keys_of

pytestmark = pytest.mark.tf


class Pair(keras.layers.Layer):
    """Two variables of one shape and dtype, created in the order of `names`."""

    def __init__(self, names, **kwargs):
        super().__init__(**kwargs)
        self.names = names

    def build(self, input_shape):
        for name in self.names:
            setattr(self, name, self.add_weight(name=name, shape=(4,), initializer="zeros"))

    def call(self, x):
        return x * self.a + self.b


def model_of(names):
    return keras.Sequential([keras.Input((4,)), Pair(names)])


def planned(names):
    """(the plan's variables, its layers) of model_of(names), as pardnn.keras.planning
    records them: in creation order, with their keys."""
    created = []

    def record(next_creator, **kwargs):
        variable = next_creator(**kwargs)
        created.append(Created(variable, kwargs.get("name") or "Variable", "planned"))
        return variable
    with tf.variable_creator_scope(record):
        model = model_of(names)
    variables = [PlannedVariable(key, c.variable.name.split(":")[0], c.short, c.variable.shape.as_list(),
                                 c.variable.dtype.name, "/device:CPU:0")
                 for key, c in zip(keys_of(created, [model], []), created)]
    return variables, [layer_summary(model)]


def built(variables, layers, names) -> Matcher:
    """model_of(names) built under a Matcher of the plan, its layers checked."""
    matcher = Matcher("plan.scope()", variables)
    with tf.variable_creator_scope(matcher.creator):
        model = model_of(names)
    matcher.check_layers([model], layers)
    return matcher, model


def test_the_planned_build_passes():
    variables, layers = planned(("a", "b"))
    assert [v.key.rsplit("/", 1)[-1] for v in variables] == ["a", "b"]
    matcher, model = built(variables, layers, ("a", "b"))
    matcher.check_variables([model], [])


def test_variables_created_in_another_order_are_refused_by_their_keys():
    variables, layers = planned(("a", "b"))
    matcher, model = built(variables, layers, ("b", "a"))        # same layers, shapes and dtypes
    with pytest.raises(UserError) as refused:
        matcher.check_variables([model], [])
    message = str(refused.value)
    assert "\n" not in message and message.startswith("plan.scope(): variable ")
    assert repr(variables[0].key) in message and "not the planned one" in message
