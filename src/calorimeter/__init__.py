"""calorimeter: measure how distributed LLM training spends time, power and heat."""

__version__ = "0.2.0"
