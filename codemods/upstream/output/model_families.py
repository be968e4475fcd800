"""Model families: how the series and the PR description group SGLang model files.

Reviewers own model code by family (DeepSeek, GLM, Qwen MoE, ...), not by the rewriter that
patched a file, so the series has one patch per family.  The mapping is data, in one place:
:data:`FAMILIES` lists ``(file name prefixes, key, title)`` in series order, and a model file
(``srt/models/<stem>.py``) belongs to the family of the longest prefix its stem starts with
(``qwen3_moe`` wins over ``qwen3``).
A file no prefix matches belongs to :data:`OTHER`, placed after every named family.
"""

from __future__ import annotations

#: (file-name prefixes, family key, title), in the order the series reviews them.
FAMILIES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("kimi",), "kimi", "Kimi"),
    (
        ("llama", "qwen2", "qwen3", "apertus", "nanbeige", "mllama"),
        "llama-qwen-dense",
        "Llama / Qwen dense",
    ),
    (
        ("qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_vl", "qwen2_5_vl", "qwen3_5"),
        "qwen-moe-vl",
        "Qwen MoE / VL / hybrid",
    ),
    (("deepseek",), "deepseek", "DeepSeek"),
    (("glm",), "glm", "GLM"),
    (("minimax",), "minimax", "MiniMax"),
    (("gemma",), "gemma", "Gemma"),
    (("nemotron", "nano_nemotron"), "nemotron", "Nemotron"),
    (("bailing",), "bailing", "Bailing"),
    (("mimo",), "mimo", "MiMo"),
    (("lfm2",), "lfm2", "LFM2"),
    (("gpt_oss",), "gpt-oss", "GPT-OSS"),
    (("exaone",), "exaone", "EXAONE"),
    (("longcat",), "longcat", "LongCat"),
)
#: The family of a model file no prefix matches.
OTHER = ("other-models", "other models")


def family_of(stem: str) -> tuple[str, str]:
    """``(key, title)`` of the family of model file ``<stem>.py``."""
    matches = [
        (len(prefix), key, title)
        for prefixes, key, title in FAMILIES
        for prefix in prefixes
        if stem.startswith(prefix)
    ]
    if not matches:
        return OTHER
    _, key, title = max(matches, key=lambda match: match[0])
    return key, title


def family_rank(key: str) -> int:
    """Position of a family in the series (:data:`OTHER` after every named one)."""
    keys = [key_ for _, key_, _ in FAMILIES]
    return keys.index(key) if key in keys else len(keys)


def family_title(key: str) -> str:
    """The title of the family with ``key`` (:data:`OTHER`'s for a key no family has)."""
    titles = {key_: title for _, key_, title in FAMILIES}
    return titles.get(key, OTHER[1])
