"""The useful part of a TensorFlow error message.

An op that fails inside a tf.function reports `Graph execution error:`, then the
Python stack that defined the node, then the op's own words, then `[[{{node ...}}]]`
and `[Op:...]`. Eager ops put `{{function_node ...}}` in front. Reports and errors
show only the op's own words.
"""

from __future__ import annotations

import re

_NOISE_PREFIXES = ("Graph execution error", "Detected at node", 'File "', "[[{{")
_NODE_TAGS = re.compile(r"\{\{function_node [^}]*\}\}|\[\[\{\{[^\]]*\}\}\]\]|\[Op:[^\]]*\]")


def op_error_reason(message: str) -> str:
    """The op's own message in a TensorFlow error message, on one line.

    Example:
      op_error_reason("Graph execution error:\\n\\nDetected at node d defined at ...:\\n"
                      "  File \\"x.py\\", line 3, in f\\n\\nInvalid JPEG data or crop window."
                      "\\n\\t [[{{node d}}]] [Op:__inference_f_9]")
      # 'Invalid JPEG data or crop window.'
    """
    kept = []
    for line in message.splitlines():
        text = _NODE_TAGS.sub("", line).strip()
        if text and not text.startswith(_NOISE_PREFIXES):
            kept.append(text)
    # The op's words come last; above them is the stack that defined the node.
    return kept[-1] if kept else "no message"
