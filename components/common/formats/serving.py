"""The serving contract of the exported model: signature, input and output names.

The Trainer writes the SavedModel with these names (components/trainer/export.py), the
Evaluator asks TFMA for them, and clients call them:

  serving_default   images: string [B] (JPEG or PNG bytes)
  serving_examples  examples: string [B] (serialized tf.Examples; what TFMA feeds)

Both return probabilities float32 [B, C], class_names string [B, C] (aligned with the
probabilities, as TF Serving's Classify API returns them) and predicted_class string [B].
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

SERVING_DEFAULT = "serving_default"
SERVING_EXAMPLES = "serving_examples"
IMAGES_INPUT = "images"
EXAMPLES_INPUT = "examples"
PROBABILITIES = "probabilities"
CLASS_NAMES = "class_names"
PREDICTED_CLASS = "predicted_class"

# serving_examples as a function of this process: serialized tf.Examples (a string
# tensor [B]) to the outputs above by name (tensors).
ExamplesScorer = Callable[[Any], Mapping[str, Any]]
