"""ImageEvaluator: TFX's Evaluator (TFMA), configured for the image classifier."""
