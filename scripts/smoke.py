"""The smoke job `make run` runs until the experiment runner exists: load Fashion-MNIST,
train the mlp for one epoch at batch 128, print where the data came from and test accuracy."""

import lbtrain
import tensorflow as tf

dataset = lbtrain.load_dataset("fashion_mnist")
print(f"fashion_mnist: {len(dataset.x_train)} train / {len(dataset.x_test)} test samples from {dataset.source}")
model = lbtrain.build_model("mlp", dataset.input_shape, dataset.num_classes, seed=0)
model.compile(
    optimizer=tf.keras.optimizers.SGD(0.1, momentum=0.9),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
model.fit(dataset.x_train, dataset.y_train, batch_size=128, epochs=1, verbose=2)
loss, accuracy = model.evaluate(dataset.x_test, dataset.y_test, batch_size=1024, verbose=0)
print(f"test accuracy after 1 epoch: {accuracy:.4f} (loss {loss:.4f})")
