"""The notebook API: the pipeline's measurements of a model in memory, through the same
library functions the pipeline's jobs call.

- ``Config.load`` reads a config (a file, a mapping or one block) as a run of it is read:
  each stage's settings, its models loaded as the pipeline prepares them (GGUF, hub,
  local or packaged folders, random twins, training checkpoints), its datasets' samples
  and corpora, its prompt sets and observers.
- ``equilearning_law``: the equi-learning pass over texts (He & Su: PR of every layer and
  its law, separation fuzziness, token views, the held-out loss) and named observers (the
  built-in geometry or a researcher's own statistic, ``layerlaws.forward.observers``).
- ``signatures``: the probability signatures of texts against the model's embeddings
  (Yao & Xu).
- ``coupling``: the block coupling and trajectories of a prompt, each kind alone or all
  (Aubry et al.); ``random_twin``: the untrained control.

Without a config, each stage's settings are the schema's defaults (``config.yaml`` sets
more: ``Config.load()`` reads it); a test checks that the API on a config gives the
pipeline's tables of it.
"""

from layerlaws.api.config import Config, PromptSet
from layerlaws.api.measurements import (
    Coupling,
    Law,
    Texts,
    coupling,
    equilearning_law,
    random_twin,
    signatures,
)
from layerlaws.coupling.measurement import COUPLING_KINDS
from layerlaws.coupling.settings import CouplingSettings
from layerlaws.equilearning.settings import EquilearningSettings
from layerlaws.forward.observers import ObserverSpec
from layerlaws.signatures.settings import SignatureSettings

__all__ = [
    "COUPLING_KINDS",
    "Config",
    "Coupling",
    "CouplingSettings",
    "EquilearningSettings",
    "Law",
    "ObserverSpec",
    "PromptSet",
    "SignatureSettings",
    "Texts",
    "coupling",
    "equilearning_law",
    "random_twin",
    "signatures",
]
