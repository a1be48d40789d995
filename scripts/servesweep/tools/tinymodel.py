"""Build the tiny local model folder the mocker and aiperf need, without a hub.

Two layouts of the same files: a plain HF-style folder (for the mocker's
``--model-path``) and an HF-cache entry (``local/<name>``) because aiperf with
``HF_HUB_OFFLINE=1`` only accepts repo ids.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import struct
from array import array
from pathlib import Path

VOCAB_SIZE = 2048  # the mocker emits ids in [1000, 2000): the vocab must cover them
REVISION = "0000000000000000000000000000000000000000"
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
WORDS = (
    "the of and to in is was for on that with as by at from it an be are this "
    "which or his her had not but have they one were all their there been has "
    "when who will more no if out so said what up its about into than them can "
    "only other new some could time these two may then do first any my now such "
    "like our over man me even most made after also did many before must through "
    "back years where much your way well down should because each just those "
    "people how too little state good very make world still own see men work long "
    "get here between both life being under never day same another know while "
    "last might us great old year off come since against go came right used take "
    "three serving latency token prefix cache router worker decode prefill batch"
).split()


def _corpus(lines: int = 4000, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        out.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))))
        out.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(60)))
    return out


def build(folder: Path, name: str) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|user|>", "<|assistant|>", "<|system|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=1,
    )
    tok.train_from_iterator(_corpus(), trainer)
    if tok.get_vocab_size() < 2000:
        raise SystemExit(f"tokenizer has {tok.get_vocab_size()} tokens, the mocker needs >= 2000")

    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tok.save(str(tmp / "tokenizer.json"))
    (tmp / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<|endoftext|>",
                "eos_token": "<|endoftext|>",
                "unk_token": "<|endoftext|>",
                "model_max_length": 32768,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=1,
        )
    )
    (tmp / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "vocab_size": tok.get_vocab_size(),
                "hidden_size": 256,
                "intermediate_size": 512,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "max_position_embeddings": 32768,
                "eos_token_id": 0,
                "bos_token_id": 0,
                "torch_dtype": "bfloat16",
            },
            indent=1,
        )
    )
    (tmp / "generation_config.json").write_text(json.dumps({"eos_token_id": 0}))
    write_weights(tmp / "model.safetensors", json.loads((tmp / "config.json").read_text()))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def _tensor_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """LlamaForCausalLM's parameter names and shapes (what vLLM's Llama loader expects)."""
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = cfg["num_key_value_heads"] * h // cfg["num_attention_heads"]
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,), "lm_head.weight": (v, h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (h, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, h),
            p + "mlp.gate_proj.weight": (inter, h),
            p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
        }
    return shapes


def _bf16(values: array) -> bytes:
    """float32 -> bfloat16 by keeping the upper half of each little-endian float."""
    return array("H", values.tobytes())[1::2].tobytes()


def write_weights(path: Path, cfg: dict, seed: int = 11) -> None:
    """Random weights in safetensors layout, without torch: N(0, 0.02), norms at 1."""
    rng = random.Random(seed)
    header, blobs, offset = {}, [], 0
    for name, shape in sorted(_tensor_shapes(cfg).items()):
        n = 1
        for d in shape:
            n *= d
        ones = name.endswith("norm.weight")
        blob = _bf16(array("f", [1.0] * n if ones else [rng.gauss(0.0, 0.02) for _ in range(n)]))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for blob in blobs:
            f.write(blob)


def install_hf_cache(folder: Path, hf_home: Path, name: str) -> None:
    entry = hf_home / "hub" / f"models--local--{name}"
    snap = entry / "snapshots" / REVISION
    shutil.rmtree(entry, ignore_errors=True)
    snap.mkdir(parents=True)
    for f in folder.iterdir():
        shutil.copy2(f, snap / f.name)
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text(REVISION)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=".cache/models", help="directory for the model folder")
    ap.add_argument("--hf-home", default=".cache/hf", help="HF_HOME to lay the cache entry in")
    ap.add_argument("--name", default="tiny-llama")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    folder = Path(a.out) / a.name
    if a.force or not (folder / "model.safetensors").exists():
        build(folder, a.name)
    install_hf_cache(folder, Path(a.hf_home), a.name)
    print(f"model folder {folder}; aiperf tokenizer local/{a.name} under HF_HOME={a.hf_home}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
