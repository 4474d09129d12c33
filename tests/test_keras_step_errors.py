"""pardnn.keras.plan on a training step that fails when traced: the error names what
fails, the step and the line of the user's code, not batch_spec; a batch the model's
own step cannot take still names batch_spec. In-process: each error is raised while
the step is first traced, before anything is estimated, placed or written."""

import inspect

import numpy as np
import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import keras
import tensorflow as tf

from pardnn.base.errors import UserError

pytestmark = pytest.mark.tf
IDS = np.zeros((8, 6), "int32")
TARGETS = np.zeros((8, 4), "float32")


def embedding_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((6,), dtype="int32"), keras.layers.Embedding(50, 8),
                             keras.layers.Flatten(), keras.layers.Dense(4)])


def build_custom():
    return embedding_model(), keras.optimizers.Adam(1e-3)


def halved(grads):
    # an Embedding's gradient is IndexedSlices, which has no `/`: a TypeError
    return [g / 2 for g in grads]


def halving_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = halved(tape.gradient(loss, model.trainable_variables))
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


class HalvingModel(keras.Model):
    """A model whose own train_step divides its gradients."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        grads = tape.gradient(loss, self.trainable_variables)
        grads = [g / 2 for g in grads]
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


def build_fit():
    inner = embedding_model()
    model = HalvingModel(inner.inputs, inner.outputs)
    model.compile(optimizer="adam", loss="mse")
    return model


def build_plain():
    model = embedding_model()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model


def line_of(fn, text) -> int:
    """The file line of `fn`'s source that holds `text`."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def plan_error(tmp_path, build, batch, **kwargs) -> str:
    import pardnn.keras
    with pytest.raises(UserError) as caught:
        pardnn.keras.plan(build, batch, "cpu:2", "1GiB", directory=str(tmp_path / "plan"), verbose=0, **kwargs)
    assert not (tmp_path / "plan").exists()
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_custom_step_that_fails_names_the_step_and_its_line(tmp_path):
    message = plan_error(tmp_path, build_custom, (IDS, TARGETS), step=halving_step)
    assert message.startswith("step: halving_step fails at ")
    assert f"test_keras_step_errors.py:{line_of(halved, 'g / 2')} in halved" in message
    assert "(return [g / 2 for g in grads])" in message
    assert message.endswith("unsupported operand type(s) for /: 'IndexedSlices' and 'int'")
    assert "batch_spec" not in message


def test_a_models_own_train_step_that_fails_names_it_and_its_line(tmp_path):
    message = plan_error(tmp_path, build_fit, (IDS, TARGETS))
    assert message.startswith("build: the train_step of model ")
    assert f"test_keras_step_errors.py:{line_of(HalvingModel.train_step, 'g / 2')} in train_step " \
           "(grads = [g / 2 for g in grads]): " in message
    assert "'IndexedSlices' and 'int'" in message and "batch_spec" not in message


def test_a_batch_kerass_own_step_cannot_take_names_batch_spec(tmp_path):
    """No line of the user's code in the failing trace: Keras' loss refuses the targets."""
    message = plan_error(tmp_path, build_plain, (IDS, np.zeros((8, 4, 2), "float32")))
    assert message.startswith("batch_spec: the step cannot be traced with it (")


def test_user_frame_is_the_innermost_frame_outside_tensorflow_keras_and_pardnn():
    from pardnn.keras.steps import user_frame

    def fails():
        return tf.matmul(tf.ones([2, 3]), tf.ones([2, 3]))
    with pytest.raises(Exception) as caught:
        fails()
    frame = user_frame(caught.value)
    assert (frame.lineno, frame.name) == (line_of(fails, "tf.matmul"), "fails")
    assert frame.filename == __file__ and "tf.matmul" in frame.line
    with pytest.raises(Exception) as caught:
        keras.layers.Dense(2)(tf.ones([3]))
    assert user_frame(caught.value).name == "test_user_frame_is_the_innermost_frame_outside_tensorflow_keras_and_pardnn"
    assert user_frame(ValueError("never raised")) is None
