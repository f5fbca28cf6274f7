"""Write tiny random-weight models for the real-engine tests.

No model can be downloaded here, so the tests serve models made locally: a
GGUF for llama.cpp's ``llama-server`` and a Hugging Face Llama directory for
vLLM. Both share one byte-level GPT-2 style BPE tokenizer, so a prompt has the
same token count on both engines.

Random weights would emit broken UTF-8 and could stop at EOS at any point.
The "determinism trick" fixes that: dimension 0 of every token embedding is
1.0 (it dominates the residual stream and survives RMSNorm) and the output
projection's weight from that dimension is -10 for every token that is not
printable ASCII, EOS and the chat specials included. Output is then printable
ASCII only, one token per streamed chunk on llama.cpp, and ``max_tokens`` is
always reached exactly.

A second GGUF, ``--gguf-draft``, is the draft model that disagrees with the
first: the same weights with seeded noise added (``write_gguf``), for the
speculative-decoding tests (the target served as its own draft agrees always).

Usage: python make_tiny_models.py --gguf OUT.gguf --gguf-draft DRAFT.gguf --hf OUTDIR
(any of them).
The GGUF part needs only ``gguf`` and ``numpy``; the HF part needs ``torch``,
``transformers`` and ``tokenizers`` (it runs in the vLLM venv).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

SEED = 1234
DRAFT_SEED = 4321  # the noise that makes the disagreeing draft (write_gguf's perturb)
# How far the disagreeing draft is from the target: noise at this fraction of the
# weights' own scale. The tiny models are near bigram machines, so agreement is
# all or nothing: at 0.2 and 0.3 llama-server still accepted (nearly) every draft,
# at 0.4 and 0.5 none; 0.5 keeps a margin (docs/engines.md, "Speculative decoding").
DRAFT_PERTURB = 0.5
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOS = "<|endoftext|>"
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Pairs of GPT-2 byte-level strings ("Ġ" is a space); each part must exist
# before its merge. A few dozen common English pieces keep prompts realistic.
MERGES = ", ".join(
    [
        "Ġ t, Ġ a, h e, i n, r e, o n, Ġt he, e r, Ġ s, a t",
        "Ġ w, Ġ o, e n, Ġ c, i t, i s, a n, o r, e s, Ġ b",
        "e d, Ġ f, in g, Ġ p, o u, Ġa n, a l, a r, Ġt o, Ġ m",
        "Ġo f, Ġ in, Ġ d, Ġ h, Ġan d, l e, o w, Ġ re, Ġ l, i c",
    ]
).split(", ")
LN_EPS = 1e-5
ROPE_THETA = 10000.0
MAX_POSITIONS = 32768
SUPPRESS = -10.0


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (byte-level BPE)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = keep[:]
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(keep, chars, strict=True)}


class Vocab:
    """The shared tokenizer: 256 byte tokens, then merges, then specials."""

    def __init__(self) -> None:
        enc = bytes_to_unicode()
        dec = {c: b for b, c in enc.items()}
        self.tokens: list[str] = [enc[b] for b in range(256)]
        index = {t: i for i, t in enumerate(self.tokens)}
        for merge in MERGES:
            left, right = merge.split(" ")
            if left not in index or right not in index:
                raise ValueError(f"merge {merge!r} uses a piece not yet in the vocabulary")
            index[left + right] = len(self.tokens)
            self.tokens.append(left + right)
        self.merges = list(MERGES)
        self.n_normal = len(self.tokens)
        self.tokens += SPECIALS
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.printable = np.zeros(len(self.tokens), dtype=bool)
        for i, tok in enumerate(self.tokens[: self.n_normal]):
            raw = bytes(dec[c] for c in tok)
            self.printable[i] = all(0x20 <= b <= 0x7E for b in raw)

    def __len__(self) -> int:
        return len(self.tokens)


def write_gguf(path: Path, vocab: Vocab, perturb: float = 0.0) -> None:
    """Write the llama.cpp model: llama arch, 2 layers, hidden 128, F32.

    ``perturb`` > 0 writes the draft that disagrees: the same weights plus
    seeded noise of that many times their scale, so it shares the target's
    vocabulary (llama.cpp requires it of a draft) and agrees with it only part
    of the time. The determinism trick is applied after the noise, so the
    draft too emits printable ASCII only."""
    import gguf

    n_embd, n_head, n_kv, n_ff, n_layer = 128, 4, 2, 384, 2
    head_dim = n_embd // n_head
    rng = np.random.default_rng(SEED)
    noise = np.random.default_rng(DRAFT_SEED)

    def rand(*shape: int) -> np.ndarray:
        weights = rng.standard_normal(shape)
        if perturb:
            weights = weights + perturb * noise.standard_normal(shape)
        return (weights * 0.02).astype(np.float32)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("speed-matrix tiny random llama" + (f" (draft, perturbed {perturb:g})" if perturb else ""))
    w.add_context_length(MAX_POSITIONS)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_layer_norm_rms_eps(LN_EPS)
    w.add_vocab_size(len(vocab))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(vocab.tokens)
    normal, control = int(gguf.TokenType.NORMAL), int(gguf.TokenType.CONTROL)
    w.add_token_types([normal] * vocab.n_normal + [control] * len(SPECIALS))
    w.add_token_merges(vocab.merges)
    w.add_bos_token_id(vocab.ids[EOS])
    w.add_eos_token_id(vocab.ids[EOS])
    w.add_eot_token_id(vocab.ids["<|im_end|>"])
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML_TEMPLATE)

    # numpy shapes are (out, in); GGUF stores them reversed as ggml expects.
    embd = rand(len(vocab), n_embd)
    embd[:, 0] = 1.0
    w.add_tensor("token_embd.weight", embd)
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", rand(n_head * head_dim, n_embd))
        w.add_tensor(f"blk.{i}.attn_k.weight", rand(n_kv * head_dim, n_embd))
        w.add_tensor(f"blk.{i}.attn_v.weight", rand(n_kv * head_dim, n_embd))
        w.add_tensor(f"blk.{i}.attn_output.weight", rand(n_embd, n_head * head_dim))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", rand(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_up.weight", rand(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_down.weight", rand(n_embd, n_ff))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    out = rand(len(vocab), n_embd)
    out[:, 0] = np.where(vocab.printable, 0.0, SUPPRESS).astype(np.float32)
    w.add_tensor("output.weight", out)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_hf(outdir: Path, vocab: Vocab) -> None:
    """Write the vLLM model: a bf16 LlamaForCausalLM plus a fast tokenizer."""
    import torch
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    outdir.mkdir(parents=True, exist_ok=True)
    bpe = models.BPE(
        vocab={t: i for i, t in enumerate(vocab.tokens[: vocab.n_normal])},
        merges=[tuple(m.split(" ")) for m in vocab.merges],
    )
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    if tok.get_vocab_size() != len(vocab):
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} tokens, expected {len(vocab)}")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOS,
        eos_token=EOS,
        unk_token=None,
        pad_token=EOS,
        model_max_length=MAX_POSITIONS,
        chat_template=CHATML_TEMPLATE,
    )
    fast.save_pretrained(outdir)

    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=LN_EPS,
        rope_theta=ROPE_THETA,
        tie_word_embeddings=False,
        bos_token_id=vocab.ids[EOS],
        eos_token_id=vocab.ids[EOS],
        pad_token_id=vocab.ids[EOS],
        torch_dtype="bfloat16",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 1.0
        suppress = torch.tensor(np.where(vocab.printable, 0.0, SUPPRESS), dtype=torch.float32)
        model.lm_head.weight[:, 0] = suppress.to(model.lm_head.weight.dtype)
    model.to(torch.bfloat16).save_pretrained(outdir, safe_serialization=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, help="write the llama.cpp GGUF model here")
    parser.add_argument("--gguf-draft", type=Path,
                        help="write the GGUF draft model that disagrees with --gguf's here")
    parser.add_argument("--draft-perturb", type=float, default=DRAFT_PERTURB,
                        help=f"noise of the draft, relative to the weights (default {DRAFT_PERTURB})")
    parser.add_argument("--hf", type=Path, help="write the Hugging Face model directory here")
    args = parser.parse_args(argv)
    if args.gguf is None and args.gguf_draft is None and args.hf is None:
        parser.error("give --gguf, --gguf-draft and/or --hf")
    if args.draft_perturb <= 0:
        parser.error(f"--draft-perturb must be > 0 (got {args.draft_perturb:g}): 0 is the target itself")
    vocab = Vocab()
    for path, perturb in ((args.gguf, 0.0), (args.gguf_draft, args.draft_perturb)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_gguf(path, vocab, perturb)
            print(f"wrote {path} ({len(vocab)} tokens)", file=sys.stderr)
    if args.hf is not None:
        write_hf(args.hf, vocab)
        print(f"wrote {args.hf} ({len(vocab)} tokens)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
