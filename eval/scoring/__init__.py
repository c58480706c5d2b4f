"""Outputs of methods -> numbers beyond ROC: faithfulness, chance lines, statistical tests, weight histograms."""
