"""The name of a prepared model's facts file (torch-free, so the workflow can name it)."""

MODEL_METADATA = "layerlaws_model.json"
"""File of a prepared model's folder that holds its facts (``layerlaws.models.facts``)."""
