"""ImageEvaluator: blesses a candidate model against the served champion."""
