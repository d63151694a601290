"""One equi-learning pass, built in one place for the pipeline's ``equilearning_pass`` rule
and the Python API (``layerlaws.api.equilearning_law``): the probe's tokens table (He & Su
Fig. 7: next-token, masked-LM or span-corruption probing), the check that every target
offset has more regression rows than features, the observers (``PassObservers``: PR
statistics, separation fuzziness, token views, held-out evaluation, and the named ones of
``equilearning.observers``), the model pass over them, their tables and the rule's
outputs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import polars as pl

from layerlaws.core.atomic import atomic_path, write_csv, write_json, write_npz
from layerlaws.core.progress import ProgressSaves
from layerlaws.equilearning.pass_observers import PassObservers
from layerlaws.equilearning.settings import EquilearningSettings
from layerlaws.equilearning.statistics import check_enough_rows
from layerlaws.forward.masking import probe_layers, probe_of, probe_tokens
from layerlaws.forward.model_pass import run_forward_pass
from layerlaws.forward.observers import ObserverSpec
from layerlaws.forward.span_corruption import Seq2SeqVocabulary
from layerlaws.models.architectures import LayerChoice
from layerlaws.models.facts import ModelFacts

log = logging.getLogger("layerlaws")


@dataclass
class EquilearningPass:
    """A pass ready to run: its probed tokens, its settings and its observers."""

    tokens: pl.DataFrame
    """The tokens table as the probe reads it (``probe_tokens``)."""
    facts: ModelFacts
    """The model's facts, ``num_layers`` the L of ``layers``."""
    tokenizer: Any
    settings: EquilearningSettings
    probe: str
    """``next_token``, ``masked_lm`` or ``span_corruption`` (``auto`` resolved)."""
    layers: LayerChoice
    """The states regressed (``probe_layers``: an encoder–decoder's one stack, or both)."""
    observers: PassObservers
    named: tuple[ObserverSpec, ...] = ()
    """The named observers' specs (``equilearning.observers``)."""
    fuzziness_host_bytes: int | None = None
    """Host memory of the separation fuzziness's open class sums (``SeparationFuzziness``);
    None: no limit."""

    @classmethod
    def prepare(
        cls,
        tokens: pl.DataFrame,
        facts: ModelFacts,
        tokenizer: Any,
        settings: EquilearningSettings,
        probe: str = "auto",
        seq2seq: Seq2SeqVocabulary | None = None,
        named: Sequence[ObserverSpec] = (),
        fuzziness_host_bytes: int | None = None,
    ) -> EquilearningPass:
        """The pass over ``tokens`` (a tokens table, ``layerlaws.text.tokens``) of a model
        with ``facts`` and ``tokenizer``, probed by ``probe`` (``auto``: the family's own
        task) and, for an encoder–decoder, its ``seq2seq`` vocabulary; its layers are those
        of ``settings.encoder_decoder`` and ``settings.layer_states`` (``probe_layers``);
        ``named``: the named observers measured besides (``observer_specs``); the
        separation fuzziness's open class sums beyond ``fuzziness_host_bytes`` of host
        memory kept on the scratch disk (``SeparationFuzziness``).
        Raises LayerlawsError, before any model runs, on a probe the family cannot take or
        an offset with no more rows than the hidden size."""
        probe = probe_of(probe, facts.model_type)
        layers = probe_layers(
            probe, facts.model_type, settings.encoder_decoder, settings.layer_states
        )
        facts = facts.counting(layers)
        probed = probe_tokens(
            tokens,
            probe=probe,
            vocab_size=facts.vocab_size,
            mask_token_id=tokenizer.mask_token_id,
            masking=settings.masking,
            special_tokens=settings.special_tokens,
            encoder_decoder=settings.encoder_decoder,
            seq2seq=seq2seq,
        )
        check_enough_rows(probed, settings.offsets, facts.hidden_size)
        observers = PassObservers.build(
            probed, facts, tokenizer, settings, probe, named, fuzziness_host_bytes
        )
        return cls(
            probed,
            facts,
            tokenizer,
            settings,
            probe,
            layers,
            observers,
            tuple(named),
            fuzziness_host_bytes,
        )

    def fresh_observers(self) -> PassObservers:
        """Another set of the pass's observers, empty (a shard's, to merge into)."""
        return PassObservers.build(
            self.tokens,
            self.facts,
            self.tokenizer,
            self.settings,
            self.probe,
            self.named,
            self.fuzziness_host_bytes,
        )

    def run(
        self,
        model: Any,
        batch_size: int | str,
        device: str,
        *,
        saves: ProgressSaves | None = None,
        sequence_indices: list[int] | None = None,
        progress: bool = True,
    ) -> dict[str, Any]:
        """Run ``model`` (placed on ``device``, the first of its devices) over the tokens (or
        the sequences at ``sequence_indices``, a shard's) in batches of ``batch_size``
        (``auto``: as large as fits), feeding the observers; resumes from ``saves`` and
        writes them when given; ``progress``: a progress bar with the rate. Returns the
        pass's report (rows, tokens, tokens per second, batches, …)."""
        return run_forward_pass(
            model,
            self.facts,
            self.tokens,
            self.observers.observers,
            batch_size,
            device,
            logit_observers=self.observers.logit_observers,
            saves=saves,
            sequence_indices=sequence_indices,
            progress=progress,
            layers=self.layers,
        )

    def tables(self) -> dict[str, pl.DataFrame]:
        """``pr``, ``evaluation``, ``fuzziness`` and ``token_views`` tables."""
        return self.observers.tables(self.settings)

    def write_outputs(
        self, paths: Mapping[str, str], report: dict[str, Any], saves: ProgressSaves | None
    ) -> None:
        """Write the pass's outputs to ``paths`` (by the rule's output names: the tables,
        ``token_states``, the named observers' folder ``observers`` and the ``report``,
        which holds the facts, the run's ``report`` and what the ``saves`` cost), each
        atomically."""
        tables = self.tables()
        for name, table in tables.items():
            write_csv(paths[name], table)
        write_npz(paths["token_states"], self.observers.token_states())
        with atomic_path(paths["observers"]) as folder:
            folder.mkdir()
            for name, table in self.observers.named_tables().items():
                table.write_csv(folder / f"{name}.csv")
        write_json(
            paths["report"],
            {
                **asdict(self.facts),
                **report,
                **(saves.cost() if saves is not None else {}),
                "probe": self.probe,
                "layers": asdict(self.layers),
            },
        )
        log.info(
            "%d rows × %d layers at %.0f tokens/s; held-out loss %.4f",
            report["n_rows"],
            self.facts.num_layers + 1,
            report["tokens_per_second"] or 0,
            tables["evaluation"]["loss"][0],
        )
