"""ImageExampleGen: image folders to sharded TFRecords of encoded images."""
