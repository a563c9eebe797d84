"""ImageExampleGen: image folders to sharded TFRecords of encoded images.

The public names, loaded on first use (the component class loads TFX):
  from imgpipe.components.image_example_gen import ImageExampleGen, ImageOptions
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imgpipe.components.common.runtime import front_door

if TYPE_CHECKING:
    from imgpipe.components.image_example_gen.component import ImageExampleGen
    from imgpipe.components.image_example_gen.options import (
        ExampleGenConfig,
        ImageOptions,
        OutputOptions,
    )

__all__ = ["ExampleGenConfig", "ImageExampleGen", "ImageOptions", "OutputOptions"]
__getattr__ = front_door.lazy(
    __name__,
    {
        "ImageExampleGen": "component",
        "ExampleGenConfig": "options",
        "ImageOptions": "options",
        "OutputOptions": "options",
    },
)
