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



class Shaped(keras.layers.Layer):
    """One variable `w` of `size` floats."""

    def __init__(self, size, **kwargs):
        super().__init__(**kwargs)
        self.size = size

    def build(self, input_shape):
        self.w = self.add_weight(name="w", shape=(self.size,), initializer="zeros")

    def call(self, x):
        return x * self.w[:1]


def one_line(message) -> str:
    assert "\n" not in message and message.startswith("plan.scope(): ")
    return message


def refusal(action) -> str:
    """The one-line UserError message `action()` raises."""
    with pytest.raises(UserError) as refused:
        action()
    return one_line(str(refused.value))


def refused_build(variables, *layers) -> str:
    """The message of the UserError the Matcher of `variables` raised while
    keras.Sequential(layers) was built under it (Keras may re-raise it otherwise)."""
    matcher = Matcher("plan.scope()", variables)
    with pytest.raises((UserError, AttributeError)):
        with tf.variable_creator_scope(matcher.creator):
            keras.Sequential([keras.Input((4,)), *layers])
    assert isinstance(matcher.error, UserError)
    return one_line(str(matcher.error))


def test_the_keys_are_the_variables_paths_in_the_model_and_the_rest_are_numbered():
    variables, _ = planned(("a", "b"))
    assert [v.key for v in variables] == ["layers[1]/a", "layers[1]/b"]
    assert [v.short for v in variables] == ["a", "b"] and variables[0].shape == [4]
    loose = tf.Variable(1.0)
    created = [Created(loose, "loose", "no Keras layer"), Created(loose, "again", "no Keras layer")]
    assert keys_of(created, [], []) == ["created[0]/loose", "created[1]/again"]


def test_a_variable_past_the_plans_is_refused_naming_its_layer():
    variables, _ = planned(("a", "b"))
    message = refused_build(variables[:1], Pair(("a", "b"), name="pair"))      # a plan of one variable
    assert "variable 'b' of layer 'pair' (Pair) is not in the plan, which has 1 variables" in message


def test_a_variable_of_another_shape_is_refused_with_both_shapes():
    variables, _ = planned(("a", "b"))
    message = refused_build(variables, Shaped(3, name="shaped"))
    assert "of layer 'shaped' (Shaped) has shape [3] float32; the plan's variable created there, " \
           "'layers[1]/a', has [4] float32" in message


def test_a_planned_variable_not_created_is_named():
    variables, _ = planned(("a", "b"))
    matcher = Matcher("plan.scope()", variables)
    with tf.variable_creator_scope(matcher.creator):
        model = keras.Sequential([keras.Input((4,)), Shaped(4)])
    message = refusal(lambda: matcher.check_variables([model], []))
    assert f"the plan's variable 'layers[1]/b' ({variables[1].name}) was not created" in message


def test_the_model_built_is_the_outermost_model_noted():
    variables, layers = planned(("a", "b"))
    matcher = Matcher("plan.scope()", variables)
    with tf.variable_creator_scope(matcher.creator):
        model = keras.Sequential([keras.Input((4,)), Pair(("a", "b"), name="pair")])
    assert matcher.models() == [model]
    assert [c.owner for c in matcher.created] == ["layer 'pair' (Pair)"] * 2
    inner = Matcher("plan.scope()", variables)
    with tf.variable_creator_scope(inner.creator):
        outer = keras.Sequential([keras.Input((4,)), keras.Sequential([Pair(("a", "b"))])])  # built in outer's
    assert inner.models() == [outer] and inner.models()[0] is outer


def test_layers_other_than_the_plans_are_refused_naming_the_layer():
    _, layers = planned(("a", "b"))
    assert layers == [[["layers[0]", "InputLayer"], ["layers[1]", "Pair"]]]
    check = Matcher("plan.scope()", []).check_layers
    other = keras.Sequential([keras.Input((4,)), Shaped(4)])
    assert "layer layers[1] of the model built is a Shaped, the plan's is a Pair" in refusal(
        lambda: check([other], layers))
    more = keras.Sequential([keras.Input((4,)), Pair(("a", "b")), Shaped(4)])
    assert "layer layers[2] (Shaped) is not in the plan" in refusal(lambda: check([more], layers))
    fewer = keras.Sequential([keras.Input((4,))])
    assert "layer layers[1] (Pair) of the plan was not built" in refusal(lambda: check([fewer], layers))
    check([model_of(("a", "b"))], layers)                           # the planned layers pass
