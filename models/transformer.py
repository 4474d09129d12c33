"""TRN: the encoder-decoder Transformer of Vaswani et al. (NeurIPS 2017).

Thesis Table 5.1 "TRN" (IWSLT'16 German-English; 24 layers, filter 5120, model
2048: 80,550 graph nodes) and "TRN-2" (48 layers, filter 8192: 160,518). As in
tensor2tensor, `layers` counts the encoder layers and, equally many, the decoder
layers. Post-norm layers as in the paper: x = LayerNorm(x + Dropout(Sublayer(x)))
with multi-head scaled dot-product attention (causal self-attention and
encoder-decoder attention in the decoder) and a ReLU feed-forward sublayer of
width `filter`; sinusoidal positions; one embedding shared by source, target and
the output projection; label-smoothed cross-entropy (0.1); Adam (beta2 0.98,
eps 1e-9) with the paper's warm-up learning-rate schedule.

Our encoder-decoder layer pair has about 1,620 nodes where the thesis' had about
3,330 (its TF 1 / tensor2tensor graph is not published; T2T's dense layers on
rank-3 tensors, dropout and bias helpers and TF 1 gradients emit more nodes), so
24 layers would give only ~39k nodes. The named configs therefore use 49 and 99
layers to reproduce the thesis node counts, which is what matters for placement;
`--set layers=24` gives the thesis depth. Tensor dimensions are small (model 16,
filter 32/48 instead of 2048 and 5120/8192). The translation corpus is replaced by a synthetic
task: the target is the source sequence reversed.
"""

import numpy as np
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.models import layers as L

DESCRIPTION = "encoder-decoder Transformer, post-norm, label smoothing (thesis TRN)"

KNOBS = {"layers": 2, "model": 16, "filter": 32, "heads": 4, "seq": 8, "vocab": 32, "batch": 2,
         "dropout": 0.1, "label_smoothing": 0.1, "warmup": 400, "seed": 0}

SIZES = {
    "tiny": {"layers": 1, "model": 8, "filter": 16, "heads": 2, "seq": 4, "vocab": 16,
             "warmup": 10},
    "thesis": {"layers": 49},
    "thesis-2": {"layers": 99, "filter": 48},
    # Table 5.1's model 2048 and filter 5120, the 4-GPU batch of Table 6.1; the thesis
    # gives no heads, length or vocabulary: 16 heads (the paper's big model), 128
    # tokens, tensor2tensor's 2^15 subwords. 49 layers as `thesis` (the thesis' 24: layers=24).
    "real": {"layers": 49, "model": 2048, "filter": 5120, "heads": 16, "seq": 128, "vocab": 32768,
             "batch": 64},
}

# Graph nodes of the thesis configs (Table 5.1) that the named configs reproduce.
THESIS_NODES = {"thesis": 80550, "thesis-2": 160518}


def _positions(length, model):
    """The paper's sinusoidal position encodings, [length, model]."""
    pos = np.arange(length)[:, None]
    rates = 1.0 / np.power(10000.0, (2 * (np.arange(model)[None, :] // 2)) / model)
    angles = pos * rates
    angles[:, 0::2], angles[:, 1::2] = np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])
    return tf.constant(angles, tf.float32)


def _split_heads(x, batch, heads):
    """[batch * length, model] -> [batch, heads, length, model / heads]."""
    return tf.transpose(tf.reshape(x, [batch, -1, heads, x.shape[-1] // heads]), [0, 2, 1, 3])


def _attention(queries, memory, batch, heads, bias, name):
    """Multi-head scaled dot-product attention (paper §3.2); rows are batch * length."""
    with L.v1.variable_scope(name):
        model = queries.shape[-1]
        q = _split_heads(L.dense(queries, model, "q"), batch, heads)
        k = _split_heads(L.dense(memory, model, "k"), batch, heads)
        v = _split_heads(L.dense(memory, model, "v"), batch, heads)
        logits = tf.matmul(q, k, transpose_b=True) * (model // heads) ** -0.5
        if bias is not None:
            logits += bias
        context = tf.matmul(tf.nn.softmax(logits), v)
        context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, model])
        return L.dense(context, model, "output")


def _sublayer(x, y, dropout, name):
    """LayerNorm(x + Dropout(y)): the paper's residual connection around every sublayer."""
    return L.layer_norm(x + L.dropout(y, dropout), name)


def _feed_forward(x, filter_width, name):
    """ReLU(x W1 + b1) W2 + b2 (paper §3.3)."""
    with L.v1.variable_scope(name):
        return L.dense(L.dense(x, filter_width, "filter", tf.nn.relu), x.shape[-1], "output")


def _encoder(x, layers, filter_width, heads, batch, dropout):
    for i in range(layers):
        with L.v1.variable_scope(f"encoder_{i}"):
            x = _sublayer(x, _attention(x, x, batch, heads, None, "self_attention"), dropout, "norm_1")
            x = _sublayer(x, _feed_forward(x, filter_width, "ffn"), dropout, "norm_2")
    return x


def _decoder(x, memory, layers, filter_width, heads, batch, dropout, causal):
    for i in range(layers):
        with L.v1.variable_scope(f"decoder_{i}"):
            x = _sublayer(x, _attention(x, x, batch, heads, causal, "self_attention"), dropout, "norm_1")
            x = _sublayer(x, _attention(x, memory, batch, heads, None, "attention"), dropout, "norm_2")
            x = _sublayer(x, _feed_forward(x, filter_width, "ffn"), dropout, "norm_3")
    return x


def _schedule(model, warmup):
    """lr = model^-0.5 * min(step^-0.5, step * warmup^-1.5) (paper §5.3), and the step counter."""
    global_step = L.v1.train.get_or_create_global_step()
    step = tf.cast(global_step, tf.float32) + 1.0
    return model ** -0.5 * tf.minimum(tf.math.rsqrt(step), step * warmup ** -1.5), global_step


def build(layers, model, filter, heads, seq, vocab, batch, dropout, label_smoothing, warmup, seed):
    """The training graph; feeds "source", "target_in" and "target_out" ([batch, seq] int32)."""
    L.require_positive(layers=layers, model=model, filter=filter, heads=heads, seq=seq, vocab=vocab,
                       batch=batch, warmup=warmup)
    L.require_fraction(dropout=dropout, label_smoothing=label_smoothing)
    if vocab < 2:
        raise UserError(f"--set: knob 'vocab' must be at least 2, got {vocab}")
    if model % heads:
        raise UserError(f"--set: knob 'model' ({model}) must be a multiple of 'heads' ({heads})")
    v1 = L.v1
    with L.training_graph(seed) as graph:
        source = v1.placeholder(tf.int32, [batch, seq], "source")
        target_in = v1.placeholder(tf.int32, [batch, seq], "target_in")
        target_out = v1.placeholder(tf.int32, [batch, seq], "target_out")
        embedding = L.weight("embedding", [vocab, model])
        positions = _positions(seq, model)

        def embed(tokens):
            x = tf.nn.embedding_lookup(embedding, tokens) * model ** 0.5 + positions
            return tf.reshape(L.dropout(x, dropout), [batch * seq, model])

        causal = tf.constant(np.triu(np.full((seq, seq), -1e9, np.float32), 1))
        memory = _encoder(embed(source), layers, filter, heads, batch, dropout)
        decoded = _decoder(embed(target_in), memory, layers, filter, heads, batch, dropout, causal)
        logits = tf.matmul(decoded, embedding, transpose_b=True)
        smooth = tf.one_hot(tf.reshape(target_out, [-1]), vocab, 1.0 - label_smoothing,
                            label_smoothing / (vocab - 1))
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=smooth, logits=logits))
        rate, global_step = _schedule(model, warmup)
        optimizer = v1.train.AdamOptimizer(rate, beta1=0.9, beta2=0.98, epsilon=1e-9)

    def feed(step):
        tokens = L.markov_tokens(seed, step, batch, seq, vocab)
        reverse = tokens[:, ::-1]
        start = np.zeros((batch, 1), np.int32)
        return {source.name: tokens, target_in.name: np.concatenate([start, reverse[:, :-1]], 1),
                target_out.name: np.ascontiguousarray(reverse)}

    return L.finish(graph, loss, optimizer, feed, seed, global_step=global_step)
