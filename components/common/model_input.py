"""The model's input geometry, shared by ImageStatistics, the Trainer and serving.

Kept apart from preprocessing.py (which imports TensorFlow) so that configuration types
and the CLI can name these defaults without loading TensorFlow.
"""

from __future__ import annotations

# The square side, in pixels, the model takes.
DEFAULT_IMAGE_SIZE = 224
# Center crop keeps this fraction of the shorter side (the ImageNet convention 224/256).
DEFAULT_CROP_FRACTION = 0.875
