"""Compile a few functions of hand-written LLVM IR for the target numba compiles for (llvmlite, which numba
already depends on; ``FS_ISA`` narrows it).

For instructions numba does not emit from Python loops (AVX-512 VNNI and BF16 dot products) and for register tiles.
Returns ctypes functions; None where the CPU lacks a required feature, numba is absent, or llvmlite cannot compile —
callers then keep their numba/numpy paths. Compiled loops call a function by its raw address (``call_address``: a
ctypes object as an argument would cost a cast per call).
"""

import ctypes
from typing import Any

from . import CPU_FEATURES, CPU_NAME, FEATURES, HAVE_NUMBA

if HAVE_NUMBA:
    from llvmlite import ir as llvm_ir
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def call_address(typingctx, address, args):  # pragma: no cover - compiled
        """Inside numba code: call the ``void f(i64, ...)`` at ``address`` with the int64s of the tuple ``args``."""
        i64, n = llvm_ir.IntType(64), len(args.types)

        def codegen(context, builder, signature, values):
            fn = builder.inttoptr(values[0], llvm_ir.FunctionType(llvm_ir.VoidType(), [i64] * n).as_pointer())
            builder.call(fn, [builder.extract_value(values[1], j) for j in range(n)])
            return context.get_dummy_value()

        return types.void(address, args), codegen


_engines: list[Any] = []  # compiled code lives as long as its engine


def compile_ir(ir: str, features: tuple[str, ...], signatures: dict[str, Any]) -> dict[str, Any] | None:
    """{name: ctypes function} for each ``signatures[name]`` (a ctypes.CFUNCTYPE) defined in ``ir``."""
    if not HAVE_NUMBA or not FEATURES.issuperset(features):
        return None
    try:
        import llvmlite.binding as llvm

        module = llvm.parse_assembly(ir)
        module.verify()
        target = llvm.Target.from_default_triple()
        machine = target.create_target_machine(cpu=CPU_NAME, features=CPU_FEATURES, opt=3)
        engine = llvm.create_mcjit_compiler(module, machine)
        engine.finalize_object()
    except Exception:  # pragma: no cover - an llvmlite without these APIs: the other kernels still work
        return None
    _engines.append(engine)
    return {name: sig(engine.get_function_address(name)) for name, sig in signatures.items()}


ADDRESSES = ctypes.c_int64  # every IR function here takes addresses and sizes as i64
