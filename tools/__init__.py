"""The engine: compile, profile, baseline, guard, the worker pool and its sandboxed candidate processes,
and the typed reports they return (DESIGN.md section 2: imported by server/, imports only kernels/).

Deliberately empty: `python -m tools.worker`, `python -m tools.aot` and the candidate processes import
only the modules they use, and importing the package itself costs nothing (no torch, no Triton).
"""
