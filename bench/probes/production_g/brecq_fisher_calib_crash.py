# expect: freed_graph
# source: https://github.com/yhhhli/BRECQ/issues/30
"""Post-training quantization with Fisher-weighted layer reconstruction.

A small CNN is trained in full precision, wrapped into a QuantModel, and each
quantized layer is then reconstructed (AdaRound-style soft rounding) using the
diagonal Fisher of the layer output, estimated from the gradient of the KL
divergence between the FP and partially-quantized model.
"""
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

QCFG = {
    "w_bits": 4,
    "scale_method": "mse",
    "calib_samples": 64,
    "batch_size": 16,
    "recon_iters": 20,
    "recon_lr": 1e-2,
    "round_reg": 1e-3,
    "fp_steps": 30,
    "seed": 5,
}


def round_ste(x):
    return (x.round() - x).detach() + x


def lp_loss(pred, tgt, p=2.0):
    return (pred - tgt).abs().pow(p).mean()


class UniformAffineQuantizer(nn.Module):
    def __init__(self, n_bits=8, scale_method="max"):
        super().__init__()
        self.n_bits = n_bits
        self.n_levels = 2 ** n_bits
        self.scale_method = scale_method
        self.delta = None
        self.zero_point = None
        self.inited = False

    def forward(self, x):
        if not self.inited:
            self.delta, self.zero_point = self.init_quantization_scale(x)
            self.inited = True
        x_int = round_ste(x / self.delta) + self.zero_point
        x_quant = torch.clamp(x_int, 0, self.n_levels - 1)
        return (x_quant - self.zero_point) * self.delta

    def init_quantization_scale(self, x):
        if self.scale_method == "max":
            x_min, x_max = min(x.min().item(), 0), max(x.max().item(), 0)
            delta = max(float(x_max - x_min) / (self.n_levels - 1), 1e-8)
            return torch.tensor(delta), torch.tensor(float(round(-x_min / delta)))
        x_max, x_min = x.max(), x.min()
        best_score, delta, zero_point = 1e10, None, None
        for i in range(40):
            new_max = x_max * (1.0 - i * 0.01)
            new_min = x_min * (1.0 - i * 0.01)
            x_q = self.quantize(x, new_max, new_min)
            score = lp_loss(x, x_q, p=2.4)
            if score < best_score:
                best_score = score
                delta = (new_max - new_min) / (2 ** self.n_bits - 1)
                zero_point = (-new_min / delta).round()
        return delta, zero_point

    def quantize(self, x, max_v, min_v):
        delta = (max_v - min_v) / (2 ** self.n_bits - 1)
        zero_point = (-min_v / delta).round()
        x_int = torch.round(x / delta)
        x_quant = torch.clamp(x_int + zero_point, 0, self.n_levels - 1)
        return (x_quant - zero_point) * delta


class QuantModule(nn.Module):
    def __init__(self, org_module, w_params):
        super().__init__()
        if isinstance(org_module, nn.Conv2d):
            self.fwd_kwargs = dict(stride=org_module.stride, padding=org_module.padding)
            self.fwd_func = F.conv2d
        else:
            self.fwd_kwargs = dict()
            self.fwd_func = F.linear
        self.weight = org_module.weight
        self.org_weight = org_module.weight.data.clone()
        self.bias = org_module.bias
        self.org_bias = org_module.bias.data.clone() if org_module.bias is not None else None
        self.weight_quantizer = UniformAffineQuantizer(**w_params)
        self.use_weight_quant = False
        self.alpha = None  # soft-rounding variables, created at reconstruction time

    def soft_weight(self):
        q = self.weight_quantizer
        w_floor = torch.floor(self.org_weight / q.delta.detach())
        h = torch.clamp(torch.sigmoid(self.alpha) * 1.2 - 0.1, 0, 1)
        w_int = torch.clamp(w_floor + h + q.zero_point.detach(), 0, q.n_levels - 1)
        return (w_int - q.zero_point.detach()) * q.delta.detach()

    def forward(self, x):
        if self.use_weight_quant:
            weight = self.soft_weight() if self.alpha is not None else self.weight_quantizer(self.weight)
            bias = self.bias
        else:
            weight, bias = self.org_weight, self.org_bias
        return self.fwd_func(x, weight, bias, **self.fwd_kwargs)

    def set_quant_state(self, weight_quant=False):
        self.use_weight_quant = weight_quant


class QuantModel(nn.Module):
    def __init__(self, model, w_params):
        super().__init__()
        self.model = model
        self._wrap(self.model, w_params)

    def _wrap(self, module, w_params):
        for name, child in module.named_children():
            if isinstance(child, (nn.Conv2d, nn.Linear)):
                setattr(module, name, QuantModule(child, w_params))
            else:
                self._wrap(child, w_params)

    def set_quant_state(self, weight_quant=False):
        for m in self.model.modules():
            if isinstance(m, QuantModule):
                m.set_quant_state(weight_quant)

    def quant_layers(self):
        return [m for m in self.model.modules() if isinstance(m, QuantModule)]

    def forward(self, x):
        return self.model(x)


def quantize_model_till(qmodel, layer):
    qmodel.set_quant_state(False)
    for m in qmodel.quant_layers():
        m.set_quant_state(True)
        if m is layer:
            break


class GradSaverHook:
    def __init__(self):
        self.grad_out = None

    def __call__(self, module, grad_input, grad_output):
        self.grad_out = grad_output[0]


class GetLayerGrad:
    def __init__(self, qmodel, layer):
        self.qmodel, self.layer = qmodel, layer
        self.saver = GradSaverHook()

    def __call__(self, x):
        self.qmodel.eval()
        handle = self.layer.register_full_backward_hook(self.saver)
        with torch.enable_grad():
            self.qmodel.zero_grad()
            self.qmodel.set_quant_state(False)
            out_fp = self.qmodel(x)
            quantize_model_till(self.qmodel, self.layer)
            out_q = self.qmodel(x)
            loss = F.kl_div(F.log_softmax(out_q, dim=1), F.softmax(out_fp, dim=1), reduction="batchmean")
            loss.backward()  # raises
        handle.remove()
        self.qmodel.set_quant_state(False)
        return self.saver.grad_out.detach()


def save_grad_data(qmodel, layer, cali_data, batch_size):
    get_grad = GetLayerGrad(qmodel, layer)
    grads = [get_grad(cali_data[i:i + batch_size]) for i in range(0, cali_data.size(0), batch_size)]
    return torch.cat(grads).abs() + 1.0


def save_inp_oup_data(qmodel, layer, cali_data):
    store = {}

    def hook(m, inp, out):
        store["inp"], store["out"] = inp[0].detach(), out.detach()

    handle = layer.register_forward_hook(hook)
    with torch.no_grad():
        qmodel.set_quant_state(False)
        qmodel(cali_data)
    handle.remove()
    return store["inp"], store["out"]


def reconstruct_layer(qmodel, layer, cali_data, cfg):
    fisher = save_grad_data(qmodel, layer, cali_data, cfg["batch_size"])
    inp, out_fp = save_inp_oup_data(qmodel, layer, cali_data)
    q = layer.weight_quantizer
    rest = layer.org_weight / q.delta.detach() - torch.floor(layer.org_weight / q.delta.detach())
    layer.alpha = nn.Parameter(-torch.log((1.2 / (rest + 0.1)) - 1).clamp(-8, 8))
    layer.set_quant_state(True)
    opt = torch.optim.Adam([layer.alpha], lr=cfg["recon_lr"])
    for _ in range(cfg["recon_iters"]):
        out_q = layer(inp)
        rec = (fisher * (out_q - out_fp).pow(2)).mean()
        h = torch.clamp(torch.sigmoid(layer.alpha) * 1.2 - 0.1, 0, 1)
        reg = cfg["round_reg"] * (1 - (2 * h - 1).abs().pow(2)).sum()
        opt.zero_grad()
        (rec + reg).backward()
        opt.step()
    return rec.item()


def build_fp_model():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


CLASS_TEMPLATES = torch.randn(10, 3, 12, 12, generator=torch.Generator().manual_seed(0))


def synthetic_images(n, gen):
    y = torch.randint(0, 10, (n,), generator=gen)
    x = CLASS_TEMPLATES[y] + 0.8 * torch.randn(n, 3, 12, 12, generator=gen)
    return x, y


def main(cfg):
    torch.manual_seed(cfg["seed"])
    np.random.seed(cfg["seed"])
    warnings.filterwarnings("ignore")
    gen = torch.Generator().manual_seed(cfg["seed"])
    fp = build_fp_model()
    opt = torch.optim.SGD(fp.parameters(), lr=0.05, momentum=0.9)
    for _ in range(cfg["fp_steps"]):
        x, y = synthetic_images(32, gen)
        loss = F.cross_entropy(fp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    fp.eval()

    qmodel = QuantModel(fp, {"n_bits": cfg["w_bits"], "scale_method": cfg["scale_method"]})
    cali_data, _ = synthetic_images(cfg["calib_samples"], gen)
    for i, layer in enumerate(qmodel.quant_layers()):
        err = reconstruct_layer(qmodel, layer, cali_data, cfg)
        print(f"layer {i}: reconstruction loss {err:.5f}")

    x, y = synthetic_images(128, gen)
    with torch.no_grad():
        qmodel.set_quant_state(False)
        acc_fp = (qmodel(x).argmax(1) == y).float().mean().item()
        qmodel.set_quant_state(True)
        acc_q = (qmodel(x).argmax(1) == y).float().mean().item()
    print(f"fp acc {acc_fp:.3f}  w{cfg['w_bits']} acc {acc_q:.3f}")


if __name__ == "__main__":
    main(QCFG)
