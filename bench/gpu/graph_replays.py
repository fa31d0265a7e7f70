"""What the launch-shape probes (persistent_probe.py, chain_probe.py,
attention_chain_probe.py) share: capturing a function of launches in a CUDA graph, timing
the graphs in interleaved rounds, and the device's copy bandwidth."""

import torch


def graphed(fn):
    """`fn`'s launches captured in a CUDA graph (after one run outside it)."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def best_replay_us(graphs: dict, rep: int, rounds: int = 5) -> dict:
    """Microseconds per replay of each graph: the best of `rounds` interleaved rounds of
    `rep` replays each."""
    times = {name: [] for name in graphs}
    for _ in range(rounds):
        for name, g in graphs.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            g.replay()
            start.record()
            for _ in range(rep):
                g.replay()
            end.record()
            torch.cuda.synchronize()
            times[name].append(start.elapsed_time(end) / rep * 1e3)
    return {name: min(t) for name, t in times.items()}


def copy_bandwidth() -> float:
    """Bytes per second of a device-to-device copy of 1 GiB (read and written)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dst.copy_(src)
    start.record()
    for _ in range(20):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    return 2 * src.numel() * 20 / (start.elapsed_time(end) / 1e3)


def chain_table(script: str, forms: dict, vector, weights: int, products: int, rep: int, base: str) -> None:
    """The table of persistent_probe.py and chain_probe.py: each form (a function running
    the same chain of `products` one-row products over `weights` bytes, from `vector` to
    `vector`) run once from the same start, its result compared with form `base`'s, then
    timed under a CUDA graph against the weights read once at the copy bandwidth."""
    results = {}
    for name, fn in forms.items():
        vector.copy_(torch.linspace(-1, 1, vector.numel(), device="cuda").to(vector.dtype))
        fn()
        torch.cuda.synchronize()
        results[name] = vector.float().clone()
    times = best_replay_us({name: graphed(fn) for name, fn in forms.items()}, rep)
    floor = weights / copy_bandwidth() * 1e6
    import triton

    dev = torch.cuda.get_device_properties(0)
    print(f"# {script}: {dev.name}, {dev.multi_processor_count} units, torch {torch.__version__}, "
          f"triton {triton.__version__}; {products} products, {weights / 1e6:.0f} MB of bf16 weights; "
          f"floor {floor:.1f} us; best of 5 rounds of {rep} replays")
    print(f"| form | us per chain | us per product | / floor | max diff vs {base} |")
    print("| --- | --- | --- | --- | --- |")
    for name in forms:
        us = times[name]
        diff = (results[name] - results[base]).abs().max().item()
        print(f"| {name} | {us:.1f} | {us / products:.2f} | {us / floor:.2f} | {diff:.1e} |")


def chain_operands(shapes, layers: int):
    """A chain of one-row products' operands: each product's weights `(N, K)` for every layer,
    one flat bfloat16 tensor a product, and the vectors between the products: product `i`
    reads vector `i` and writes vector `i + 1` (the last, vector 0), each the length of
    the product that writes it."""
    torch.manual_seed(0)
    weights = [torch.randn(layers * n * k, device="cuda", dtype=torch.bfloat16) / 30 for n, k in shapes]
    vectors = [torch.randn(shapes[i - 1][0], device="cuda", dtype=torch.bfloat16) for i in range(len(shapes))]
    return weights, vectors
