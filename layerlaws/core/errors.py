"""The one exception type the pipeline raises for problems a user can fix."""


class LayerlawsError(Exception):
    """A problem with the user's input or environment; the message says what to do."""
