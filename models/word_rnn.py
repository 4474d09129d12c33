"""Word-RNN: a multi-layer LSTM word-level language model, unrolled over the sequence.

Thesis Table 5.1 "Word-RNN" (Sung Kim's word-rnn-tensorflow on Tiny Shakespeare:
8 layers, hidden 2048, sequence 28, 10,578 graph nodes). As in that code (a word
version of char-rnn-tensorflow): an embedding lookup, the sequence split into
steps, a stack of basic LSTM cells unrolled statically (one set of nodes per
layer and step, which is what makes the graph large), one softmax projection over
all steps, mean cross-entropy, gradients clipped by global norm and Adam.
The corpus is replaced by a synthetic Markov-chain token stream (layers.markov_tokens).
"""

import tensorflow as tf

from pardnn.models import layers as L

DESCRIPTION = "multi-layer LSTM word-level language model, statically unrolled (thesis Word-RNN)"

KNOBS = {"layers": 2, "hidden": 32, "seq": 10, "vocab": 64, "batch": 4,
         "learning_rate": 0.002, "grad_clip": 5.0, "seed": 0}

# Tensor dimensions are scaled down from the thesis (hidden 2048/4096) so a CPU
# can profile them; layers and sequence length, which set the node count, are kept.
SIZES = {
    "tiny": {"layers": 2, "hidden": 16, "seq": 5, "vocab": 32, "batch": 2},
    "thesis": {"layers": 8, "hidden": 32, "seq": 28, "vocab": 64, "batch": 4},
    "thesis-2": {"layers": 8, "hidden": 64, "seq": 25, "vocab": 64, "batch": 4},
    # Table 5.1's dimensions (hidden 2048, sequence 28), the 4-GPU batch of Table 6.1;
    # the thesis gives no vocabulary: 17,500 words make its 0.34e9 parameters.
    "real": {"layers": 8, "hidden": 2048, "seq": 28, "vocab": 17500, "batch": 1024},
}

# Graph nodes of the thesis configs (Table 5.1) that the named configs reproduce.
THESIS_NODES = {"thesis": 10578, "thesis-2": 10578}


def build(layers, hidden, seq, vocab, batch, learning_rate, grad_clip, seed):
    """The training graph; feeds "inputs" and "targets" ([batch, seq] int32)."""
    L.require_positive(layers=layers, hidden=hidden, seq=seq, vocab=vocab, batch=batch)
    v1 = L.v1
    with L.training_graph(seed) as graph:
        inputs = v1.placeholder(tf.int32, [batch, seq], "inputs")
        targets = v1.placeholder(tf.int32, [batch, seq], "targets")
        embedding = L.weight("embedding", [vocab, hidden])
        steps = tf.unstack(tf.nn.embedding_lookup(embedding, inputs), axis=1)
        cells = []
        for i in range(layers):
            with v1.variable_scope(f"lstm_{i}"):
                cells.append((L.weight("kernel", [2 * hidden, 4 * hidden]),
                              L.weight("bias", [4 * hidden], "zeros")))
        state = [(tf.zeros([batch, hidden]), tf.zeros([batch, hidden])) for _ in range(layers)]
        outputs = []
        for x in steps:
            for i, (kernel, bias) in enumerate(cells):
                state[i] = L.lstm_step(x, *state[i], kernel, bias)
                x = state[i][0]
            outputs.append(x)
        logits = L.dense(tf.reshape(tf.concat(outputs, 1), [-1, hidden]), vocab, "softmax")
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.reshape(targets, [-1]), logits=logits))
        optimizer = v1.train.AdamOptimizer(learning_rate)

    def feed(step):
        tokens = L.markov_tokens(seed, step, batch, seq + 1, vocab)
        return {inputs.name: tokens[:, :-1], targets.name: tokens[:, 1:]}

    return L.finish(graph, loss, optimizer, feed, seed, grad_clip)
