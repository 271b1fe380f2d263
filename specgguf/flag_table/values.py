"""How the flag table's values are read: each parser takes the text a user gave and returns
the value the setting wants, or raises ValueError with what was expected. The enumerations
carry llama.h's numbers (tests/test_flag_table.py checks them against the bindings), so that
the table stays free of llama.cpp."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

Parser = Callable[[str], Any]

#: llama.h's llama_load_mode (-lm/--load-mode)
LOAD_MODES = {"auto": -1, "none": 0, "mmap": 1, "mlock": 2, "mmap+mlock": 3, "dio": 4}
#: llama.h's llama_lazy_mode (-lzm/--lazy-mode)
LAZY_MODES = {"off": 0, "auto": 1, "on": 2}
#: llama.h's llama_split_mode (-sm/--split-mode)
SPLIT_MODES = {"none": 0, "layer": 1, "row": 2, "tensor": 3}
#: llama.h's llama_rope_scaling_type (--rope-scaling)
ROPE_SCALING = {"none": 0, "linear": 1, "yarn": 2}
#: --log-colors' words, as llama.cpp reads them
COLOUR_WORDS = {"on": "on", "enabled": "on", "true": "on", "1": "on", "yes": "on",
                "off": "off", "disabled": "off", "false": "off", "0": "off", "no": "off",
                "auto": "auto", "-1": "auto"}  # fmt: skip
#: llama.h's llama_pooling_type (--pooling; rank, a reranker's scores, is what --rerank sets)
POOLING = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}


def choice(names: Mapping[str, Any]) -> Parser:
    def parse(text: str) -> Any:
        key = text.strip().lower()
        if key not in names:
            raise ValueError(f"one of {', '.join(names)}")
        return names[key]

    return parse


def _number(kind: type, what: str, lo: float, hi: float) -> Parser:
    def parse(text: str) -> Any:
        try:
            x = kind(text.strip())
        except ValueError:
            raise ValueError(what) from None
        if not lo <= x <= hi:
            raise ValueError(f"{what} in {lo:g}..{hi:g}")
        return x

    return parse


def integer(lo: int, hi: int) -> Parser:
    return _number(int, "a whole number", lo, hi)


def real(lo: float, hi: float) -> Parser:
    return _number(float, "a number", lo, hi)


def reciprocal(lo: float, hi: float) -> Parser:
    """--rope-scale N: the context is stretched N times, i.e. a frequency scale of 1/N."""
    parse_real = real(lo, hi)
    return lambda text: 1.0 / parse_real(text)


def fractions(text: str) -> tuple[float, ...]:
    """-ts 3,1: each device's share of the model, as proportions (llama.cpp's tensor_split)."""
    parts = [p.strip() for p in text.replace("/", ",").split(",") if p.strip()]
    try:
        shares = tuple(float(p) for p in parts)
    except ValueError:
        raise ValueError("comma-separated proportions such as 3,1") from None
    if not shares or len(shares) > 16 or any(s < 0 for s in shares) or not any(shares):
        raise ValueError("1 to 16 non-negative proportions, not all zero")
    return shares


def switch(text: str) -> bool:
    """A switch's value: the table reads bare switches as True, their `--no-` spelling False."""
    return bool(text)


#: the tensor name patterns of a layer's FFN weights (llama.cpp's): experts, and dense
FFN_EXPERTS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
FFN_DENSE = r"\.ffn_(up|down|gate)\."


def tensor_overrides(text: str) -> tuple[tuple[str, str], ...]:
    """-ot PATTERN=BUFTYPE[,PATTERN=BUFTYPE...]: (pattern, buffer type name) pairs."""
    pairs = []
    for item in text.split(","):
        pattern, eq, buft = item.partition("=")
        if not eq or not pattern or not buft:
            raise ValueError("PATTERN=BUFFER_TYPE pairs, comma-separated, e.g. exps=CPU")
        pairs.append((pattern, buft.strip()))
    return tuple(pairs)


def first_layers_on_cpu(ffn: str) -> Parser:
    """-ncmoe N / -ncffn N: the FFN weights of layers 0..N-1 on the CPU."""
    count = integer(0, 4096)
    return lambda text: tuple((rf"blk\.{i}{ffn}", "CPU") for i in range(count(text)))


def all_on_cpu(ffn: str) -> Parser:
    """-cmoe: every layer's expert weights on the CPU (a switch)."""
    return lambda _on: ((ffn, "CPU"),)


#: ggml's GGML_MAX_N_THREADS: the CPUs a mask or range can name
MAX_CPUS = 512
#: --prio's levels (ggml_sched_priority) as the nice value llama.cpp gives the process
PRIORITY_NICE = {-1: 5, 0: 0, 1: -5, 2: -10, 3: -20}
#: ggml_numa_strategy (--numa)
NUMA = {"distribute": 1, "isolate": 2, "numactl": 3}


def cpu_mask(text: str) -> frozenset[int]:
    """-C/--cpu-mask M: a hexadecimal mask of any length (0x optional), bit i for CPU i."""
    digits = text.strip().lower().removeprefix("0x")
    if not digits or len(digits) > MAX_CPUS // 4:
        raise ValueError(f"a hexadecimal mask of 1 to {MAX_CPUS // 4} digits, e.g. 0xf")
    try:
        bits = int(digits, 16)
    except ValueError:
        raise ValueError("a hexadecimal mask, e.g. 0xf") from None
    return frozenset(i for i in range(bits.bit_length()) if bits >> i & 1)


def cpu_range(text: str) -> frozenset[int]:
    """-Cr/--cpu-range lo-hi: CPUs lo..hi (an end left out: the first or the last CPU)."""
    lo, dash, hi = text.strip().partition("-")
    try:
        first = int(lo) if lo else 0
        last = int(hi) if hi else MAX_CPUS - 1
    except ValueError:
        first = last = -1
    if not dash or not 0 <= first <= last < MAX_CPUS:
        raise ValueError(f"lo-hi with 0 <= lo <= hi < {MAX_CPUS}, e.g. 0-3")
    return frozenset(range(first, last + 1))


def zero_or_one(text: str) -> bool:
    """--cpu-strict <0|1>."""
    if text.strip() not in ("0", "1"):
        raise ValueError("0 or 1")
    return text.strip() == "1"


def priority(lowest: int) -> Parser:
    """--prio N (-1..3; the batch forms 0..3): the nice value llama.cpp gives that level."""
    level = integer(lowest, 3)
    return lambda text: PRIORITY_NICE[level(text)]


def path(text: str) -> Path:
    """A file name (not checked here: the command opens it and says why it cannot)."""
    if not text.strip():
        raise ValueError("a file name")
    return Path(text)


def text(value: str) -> str:
    """A word or list as given (a comma list of CORS origins, a path prefix): not empty, at
    most 4096 characters."""
    value = value.strip()
    if not value or len(value) > 4096:
        raise ValueError("1 to 4096 characters")
    return value


def path_prefix(value: str) -> str:
    """--api-prefix: a URL path such as /llm (a leading slash, no trailing one)."""
    value = text(value)
    if not value.startswith("/") or value.endswith("/") or any(c in value for c in "?# "):
        raise ValueError("a path such as /llm (a leading slash, no trailing one)")
    return value


def idle_seconds(text: str) -> int:
    """--sleep-idle-seconds: -1 (never) or a positive number of seconds (0 is refused, as
    llama.cpp refuses it)."""
    n = integer(-1, 1 << 24)(text)
    if n == 0:
        raise ValueError("-1 (never) or a positive number of seconds")
    return n


def csv_items(value: str) -> list[str]:
    """A comma list as llama.cpp reads one: a field may be put in double quotes to hold a
    comma, and "" inside quotes is a quote."""
    import csv

    items = next(csv.reader([value]), [])
    if not items or any(not item.strip() for item in items) or len(items) > 64:
        raise ValueError("1 to 64 comma-separated items, none empty")
    return items


#: llama.h's llama_model_kv_override_type, by the word --override-kv spells it with
KV_TYPES = {"int": 0, "float": 1, "bool": 2, "str": 3}
#: llama.h's bound on an override's key and on a str value (128 bytes with the final NUL)
KV_TEXT_MAX = 127


def _kv_value(tag: int, text: str) -> int | float | bool | str:
    """One override's value read as its type asks (strictly: llama.cpp reads a number's
    leading digits and drops the rest; a number that is not all digits is refused here)."""
    if tag == KV_TYPES["bool"]:
        if text not in ("true", "false"):
            raise ValueError("a bool is true or false")
        return text == "true"
    if tag == KV_TYPES["str"]:
        if len(text.encode()) > KV_TEXT_MAX:
            raise ValueError(f"a str value of at most {KV_TEXT_MAX} bytes")
        return text
    try:
        return int(text) if tag == KV_TYPES["int"] else float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None


def kv_overrides(value: str) -> tuple[tuple[str, int, int | float | bool | str], ...]:
    """--override-kv KEY=TYPE:VALUE[,...]: (key, llama.h's type tag, value) triples, TYPE one
    of int, float, bool (true/false) or str."""
    out = []
    for item in csv_items(value):
        key, eq, typed = item.partition("=")
        kind, colon, text = typed.partition(":")
        if not eq or not key or not colon or kind not in KV_TYPES:
            raise ValueError("KEY=TYPE:VALUE with TYPE int, float, bool or str, e.g. "
                             "tokenizer.ggml.add_bos_token=bool:false")  # fmt: skip
        if len(key.encode()) > KV_TEXT_MAX:
            raise ValueError(f"a key of at most {KV_TEXT_MAX} bytes")
        out.append((key, KV_TYPES[kind], _kv_value(KV_TYPES[kind], text)))
    return tuple(out)


def _scale(text: str) -> float:
    try:
        scale = float(text)
    except ValueError:
        raise ValueError(f"the scale {text!r} is not a number") from None
    if scale != scale or abs(scale) > 1e6:
        raise ValueError("a scale between -1e6 and 1e6")
    return scale


def scaled_files(default_scale: float | None) -> Parser:
    """--lora FNAME[,...] and --control-vector FNAME[,...] (default_scale: each file at that
    scale), or their -scaled forms FNAME:SCALE[,...] (None: the scale is given): (path,
    scale) pairs. The files are opened, and refused in one line, where they are loaded."""

    def parse(value: str) -> tuple[tuple[Path, float], ...]:
        pairs = []
        for item in csv_items(value):
            if default_scale is not None:
                pairs.append((Path(item), default_scale))
                continue
            name, colon, scale = item.rpartition(":")
            if not colon or not name:
                raise ValueError("FNAME:SCALE pairs, comma-separated, e.g. adapter.gguf:0.5")
            pairs.append((Path(name), _scale(scale)))
        return tuple(pairs)

    return parse


def layer_range(values: tuple[str, str]) -> tuple[int, int]:
    """--control-vector-layer-range START END: the layers a control vector is added to, both
    included (START 0 or less: from layer 1; END 0 or less: to the last layer)."""
    start, end = (integer(-(1 << 20), 1 << 20)(x) for x in values)
    return start, end
