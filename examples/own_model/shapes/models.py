"""A small functional convnet with batch normalization, as a team might bring its own.

lbtrain calls ``convnet(input_shape, num_classes, **options)`` in every process that trains
and expects a ``keras.Model`` returning logits; in a simulated world of W workers it turns
each ``BatchNormalization`` into per-worker ghost batch norm by itself.
"""

import keras


def convnet(input_shape, num_classes, width=16, dropout=0.0):
    """Two conv-BN-ReLU-pool blocks, global average pooling, then a Dense of logits."""
    inputs = keras.Input(shape=input_shape)
    x = inputs
    for i, filters in enumerate((width, 2 * width)):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"conv{i}")(x)
        x = keras.layers.BatchNormalization(name=f"bn{i}")(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    if dropout:
        x = keras.layers.Dropout(dropout)(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes, name="logits")(x), name="shapes_convnet")
