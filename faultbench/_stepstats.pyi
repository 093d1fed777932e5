# The compiled kernel (faultbench/_stepstats.c); addresses are ints from data_ptr().
def record(
    weights: int, grads: int, before: int, seen: int, out: int, bounds: int, layers: int, wide: bool
) -> None: ...
def inactive(address: int, shape: tuple[int, ...], wide: bool) -> int: ...  # -1: empty
def bodies() -> list[str]: ...  # the float bodies available here, fastest last
def use(name: str) -> str: ...  # record() runs on that float body; returns the previous one
