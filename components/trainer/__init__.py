"""ImageTrainer: a Keras classifier trained on ImageExampleGen's shards, served on bytes."""
