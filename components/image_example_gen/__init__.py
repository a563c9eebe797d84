"""ImageExampleGen: image folders to sharded TFRecords of encoded images.

The public names, loaded on first use (the component class loads TFX); the rest of the
package is private to it:
  from imgpipe.components.image_example_gen import ImageExampleGen, ImageOptions
  from imgpipe.components.image_example_gen import run_conversion  # `imgpipe convert`
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imgpipe.components.common.runtime import front_door

if TYPE_CHECKING:
    from imgpipe.components.image_example_gen.component import ImageExampleGen
    from imgpipe.components.image_example_gen.convert import run_conversion
    from imgpipe.components.image_example_gen.data_warnings import (
        MIN_CLASSES,
        too_few_classes_message,
    )
    from imgpipe.components.image_example_gen.driver import (
        fingerprint_change,
        resolve_input_root,
        span_fingerprint,
        split_input_base,
    )
    from imgpipe.components.image_example_gen.listing import list_images
    from imgpipe.components.image_example_gen.options import (
        LAYOUT_SPLIT,
        ON_ERROR_SKIP,
        ExampleGenConfig,
        ImageOptions,
        OutputOptions,
        eval_fraction,
        flat_splits,
    )
    from imgpipe.components.image_example_gen.publishing import is_conversion_file
    from imgpipe.components.image_example_gen.span_folders import landed_spans
    from imgpipe.components.image_example_gen.transforms import ImageConversionError

__all__ = [
    "split_input_base",
    "landed_spans",
    "fingerprint_change",
    "span_fingerprint",
    "LAYOUT_SPLIT",
    "MIN_CLASSES",
    "ON_ERROR_SKIP",
    "ExampleGenConfig",
    "ImageConversionError",
    "ImageExampleGen",
    "ImageOptions",
    "OutputOptions",
    "eval_fraction",
    "flat_splits",
    "is_conversion_file",
    "list_images",
    "resolve_input_root",
    "run_conversion",
    "too_few_classes_message",
]
# mypy reads the names above; a misspelt one fails the type check.
if not TYPE_CHECKING:
    __getattr__ = front_door.lazy(__name__)
