# expect: clean
# source: https://github.com/obisin/ComfyUI-DGLS/issues/3
"""Dynamic GPU layer swapping in the style of the ComfyUI-DGLS loader: the
transformer blocks of a diffusion model keep a CPU master copy of their
weights and are staged into reusable device slots right before they run,
with optional prefetching of the next blocks. A ComfyUI-like sampler then
runs a few denoising steps."""
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
import torch.nn as nn

GPU_DEVICE = torch.device("cpu")   # stand-in for cuda:0 in this CPU reproduction


@dataclass
class SwapArgs:
    prefetch: int = 1
    cpu_threading: bool = True
    gpu_resident: int = 0
    verbose: bool = False


args = SwapArgs()
layers = []
gpu_resident_layers = set()
device_cache = {}
transfer_lock = threading.Lock()


# ------------------------------------------------------------------ model
class DiTBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn_qkv = nn.Linear(dim, dim * 3)
        self.attn_out = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))

    def forward(self, x, t_emb):
        h = self.norm(x + t_emb)
        q, k, v = self.attn_qkv(h).chunk(3, dim=-1)
        a = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1) @ v
        x = x + self.attn_out(a)
        return x + self.mlp(self.norm(x))


class TinyDiT(nn.Module):
    def __init__(self, dim=16, depth=4):
        super().__init__()
        self.t_embed = nn.Linear(1, dim)
        self.blocks = nn.ModuleList([DiTBlock(dim) for _ in range(depth)])
        self.out = nn.Linear(dim, dim)

    def forward(self, x, t):
        t_emb = self.t_embed(t.view(-1, 1, 1).float())
        for block in self.blocks:
            x = block(x, t_emb)
        return self.out(x)


# ------------------------------------------------------------------ swapping
def _owner_and_key(module, dotted):
    if "." in dotted:
        prefix, leaf = dotted.rsplit(".", 1)
        return module.get_submodule(prefix), leaf
    return module, dotted


def _reassign_param(owner, leaf, tensor):
    cur = owner._parameters.get(leaf, None)
    if cur is not None and cur.data_ptr() == tensor.data_ptr():
        return
    owner._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)


def _prepare_swappable_layer(layer):
    if getattr(layer, "_dgls_swappable_ready", False):
        return
    layer._cpu_master_data = {}
    layer._gpu_slots = {}
    with torch.no_grad():
        for pname, p in layer.named_parameters(recurse=True):
            layer._cpu_master_data[pname] = p.data.to("cpu", copy=True)
    layer._dgls_swappable_ready = True


def stage_to_gpu(layer_idx):
    layer = layers[layer_idx]
    _prepare_swappable_layer(layer)
    with torch.no_grad():
        for pname, cpu_master in layer._cpu_master_data.items():
            gpu_t = layer._gpu_slots.get(pname)
            if gpu_t is None or gpu_t.shape != cpu_master.shape:
                with torch.inference_mode(False):
                    gpu_t = torch.empty_like(cpu_master, device=GPU_DEVICE)
                layer._gpu_slots[pname] = gpu_t
            gpu_t.copy_(cpu_master, non_blocking=True)
            owner, leaf = _owner_and_key(layer, pname)
            _reassign_param(owner, leaf, gpu_t)
    device_cache[layer_idx] = "gpu"


def evict_to_cpu(layer_idx):
    layer = layers[layer_idx]
    for pname, cpu_master in layer._cpu_master_data.items():
        owner, leaf = _owner_and_key(layer, pname)
        _reassign_param(owner, leaf, cpu_master)
    device_cache[layer_idx] = "cpu"


def calculate_needed_layers(layer_idx, prefetch):
    return {(layer_idx + i) % len(layers) for i in range(prefetch + 1)}


def fetch_missing_layers(needed_layers):
    missing = [i for i in sorted(needed_layers) if device_cache.get(i) != "gpu"]
    if not missing:
        return

    def unified_gpu_transfer():
        with transfer_lock:
            for idx in missing:
                stage_to_gpu(idx)

    if args.cpu_threading and hasattr(add_smart_swapping_to_layer, "cpu_thread_pool"):
        future = add_smart_swapping_to_layer.cpu_thread_pool.submit(unified_gpu_transfer)
        future.result()
    else:
        unified_gpu_transfer()


def cleanup_excess_layers(keep_layers):
    for idx, where in list(device_cache.items()):
        if where == "gpu" and idx not in keep_layers and idx not in gpu_resident_layers:
            evict_to_cpu(idx)


def add_smart_swapping_to_layer(layer, layer_idx):
    if not hasattr(add_smart_swapping_to_layer, "cpu_thread_pool") and args.cpu_threading:
        add_smart_swapping_to_layer.cpu_thread_pool = ThreadPoolExecutor(max_workers=1)
    original_forward = layer.forward

    def swapped_forward(*fwd_args, **kwargs):
        needed = calculate_needed_layers(layer_idx, args.prefetch)
        if device_cache.get(layer_idx) != "gpu":
            stage_to_gpu(layer_idx)
        fetch_missing_layers(needed)
        out = original_forward(*fwd_args, **kwargs)
        cleanup_excess_layers(needed)
        return out

    layer.forward = swapped_forward


class DGLSModelLoader:
    def load_model_with_swapping(self, model):
        layers.clear()
        layers.extend(model.blocks)
        for idx, layer in enumerate(layers):
            _prepare_swappable_layer(layer)
            device_cache[idx] = "cpu"
            if idx < args.gpu_resident:
                gpu_resident_layers.add(idx)
            add_smart_swapping_to_layer(layer, idx)
        return model


# ------------------------------------------------------------------ sampler
@torch.inference_mode()
def sample(model, latent, steps=3):
    for i in range(steps):
        t = torch.full((latent.shape[0],), 1.0 - i / steps)
        eps = model(latent, t)
        latent = latent - eps / steps
        print(f"step {i + 1}/{steps}: latent std={latent.std().item():.4f}")
    return latent


def main():
    torch.manual_seed(0)
    model = DGLSModelLoader().load_model_with_swapping(TinyDiT())
    latent = torch.randn(1, 8, 16)
    out = sample(model, latent)
    print("done", tuple(out.shape))
    add_smart_swapping_to_layer.cpu_thread_pool.shutdown()


if __name__ == "__main__":
    main()
