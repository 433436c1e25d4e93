"""A K-quant group's scale and bias computed inside a tile from its super-block record, in LLVM IR.

Why: GGUF's Q4_K / Q5_K / Q6_K keep, per 256 weights, one or two float16 factors and a small integer per group;
fs's tiles read a float32 scale and bias per group instead, 8 bytes per 32 weights (Q4_K: 0.75 bytes per weight
where the file has 0.56) or per 16 (Q6_K: 1.5 where the file has 0.82). A decode step streams every weight once,
so those bytes are its time. Reading the records (``fs_weights.gguf_blocks``: 24 bytes per 256 weights for
Q4_K / Q5_K, 20 for Q6_K) and multiplying in registers brings Q4_K to 0.59 and Q6_K to 1.08 bytes per weight.

Contract: the products are ``gguf_blocks.expand_records``' own, in its order, and each is exact in float32 (an
11-bit factor times a 6- or 8-bit integer), so a tile reading records computes every element with the very bits
of the same tile reading the expanded ``.scales`` / ``.biases``:

    k4 (Q4_K, Q5_K): record = d f32 | m f32 | 8 × int8 sc | 8 × int8 mn     scale = d·sc_j   bias = -(m·mn_j)
    k6 (Q6_K):       record = d f32 | 16 × int8 sc                          scale = d·sc_j   bias = scale·-32

for group g of a row: record g / per (``per`` groups a record), slot j = g mod per.
"""

from fs_weights.gguf_blocks import RECORDS

LAYOUTS = tuple(RECORDS)
MINUS_32 = "0xC040000000000000"  # -32.0 as LLVM writes a float constant (a double's bits, exact in float)


def _byte(name: str, address: str) -> list[str]:
    """%name = the int8 at ``address`` as a float."""
    return [
        f"  {name}.p = inttoptr i64 {address} to ptr",
        f"  {name}.i = load i8, ptr {name}.p, align 1",
        f"  {name} = sitofp i8 {name}.i to float",
    ]


def _float(name: str, address: str) -> list[str]:
    return [f"  {name}.p = inttoptr i64 {address} to ptr", f"  {name} = load float, ptr {name}.p, align 1"]


def products(s: str, b: str, ty: str, layout: str, mn: list[str]) -> list[str]:
    """IR of the contract's products, of type ``ty`` (float or a vector of it), from the loaded ``{s}.d`` and
    ``{s}.c`` (and, for k4, ``{b}.m`` and ``{b}.n``, which the lines ``mn`` load): every record reader's tail, so
    every one makes the very same products."""
    L = [f"  {s} = fmul {ty} {s}.d, {s}.c"]
    if layout == "k6":
        minus = MINUS_32 if ty == "float" else f"splat (float {MINUS_32})"
        return [*L, f"  {b} = fmul {ty} {s}, {minus}"]
    return [*L, *mn, f"  {b}.p = fmul {ty} {b}.m, {b}.n", f"  {b} = fneg {ty} {b}.p"]


def scale_and_bias(s: str, b: str, row: str, group: str, layout: str) -> list[str]:
    """IR defining ``s`` and ``b``: the scale and bias of group ``group`` (an i64 value) of the weight row whose
    records start at address ``row`` (an i64 value), per the module's contract."""
    R, per = RECORDS[layout]
    at = 8 if layout == "k4" else 4  # where the scales start in a record
    L = [
        f"  {s}.sb = udiv i64 {group}, {per}",
        f"  {s}.j = urem i64 {group}, {per}",
        f"  {s}.ro = mul i64 {s}.sb, {R}",
        f"  {s}.r = add i64 {row}, {s}.ro",
        f"  {s}.jo = add i64 {s}.j, {at}",
        f"  {s}.ja = add i64 {s}.r, {s}.jo",
        *_float(f"{s}.d", f"{s}.r"),
        *_byte(f"{s}.c", f"{s}.ja"),
    ]
    mn = [f"  {b}.ma = add i64 {s}.r, 4", *_float(f"{b}.m", f"{b}.ma"), f"  {b}.na = add i64 {s}.ja, 8"]
    return L + products(s, b, "float", layout, [*mn, *_byte(f"{b}.n", f"{b}.na")])


def scales_and_biases(s: str, b: str, record: str, slot: str, layout: str, lanes: int) -> list[str]:
    """IR defining ``s`` and ``b`` as <lanes x float>: the scales and biases of ``lanes`` consecutive groups of one
    super-block, whose record starts at address ``record`` and whose first group is slot ``slot`` (i64 values) - the
    contract above, lane by lane (the same products as ``scale_and_bias``'s, so the same bits)."""
    v = f"<{lanes} x float>"
    at = 8 if layout == "k4" else 4  # where the scales start in a record

    def splat(name: str, offset: int) -> list[str]:  # the record's float at ``offset``, in every lane
        return [
            f"  {name}.a = add i64 {record}, {offset}",
            *_float(f"{name}.f", f"{name}.a"),
            f"  {name}.0 = insertelement {v} poison, float {name}.f, i32 0",
            f"  {name} = shufflevector {v} {name}.0, {v} poison, <{lanes} x i32> zeroinitializer",
        ]

    def ints(name: str, offset: int) -> list[str]:  # ``lanes`` int8 from the slot on, ``offset`` into the record
        return [
            f"  {name}.a = add i64 {s}.slots, {offset}",
            f"  {name}.p = inttoptr i64 {name}.a to ptr",
            f"  {name}.i = load <{lanes} x i8>, ptr {name}.p, align 1",
            f"  {name} = sitofp <{lanes} x i8> {name}.i to {v}",
        ]

    L = [f"  {s}.slots = add i64 {record}, {slot}", *splat(f"{s}.d", 0), *ints(f"{s}.c", at)]
    return L + products(s, b, v, layout, [*splat(f"{b}.m", 4), *ints(f"{b}.n", at + 8)])
