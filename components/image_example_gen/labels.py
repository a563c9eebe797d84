"""Class names to integer ids, stable across retraining runs when a label map is given.

The label files themselves are read and written by components/common/formats/label_map.py.
"""

from __future__ import annotations

from imgpipe.components.image_example_gen.options import NEW_LABEL_APPEND


def build_labels(found: list[str], existing: list[str] | None, on_new_label: str) -> list[str]:
    """Class names in id order: sorted, or the existing map plus (optionally) new classes.

    Raises:
      ValueError: a class is not in the existing map and on_new_label is `fail`.
    """
    if existing is None:
        return sorted(found)
    new = sorted(set(found) - set(existing))
    if new and on_new_label != NEW_LABEL_APPEND:
        raise ValueError(
            f"classes {new} are not in the given label map ({len(existing)} classes); "
            "pass on_new_label='append' to give them new ids at the end"
        )
    return list(existing) + new
