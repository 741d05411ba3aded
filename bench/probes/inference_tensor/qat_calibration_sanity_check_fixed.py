# expect: clean
# source: https://github.com/qualcomm/aimet/issues/2026
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


@dataclass
class QATConfig:
    param_bw: int = 8
    output_bw: int = 8
    num_calibration_batches: int = 2
    num_sanity_val_steps: int = 2
    max_epochs: int = 2
    batch_size: int = 16
    lr: float = 1e-3
    seed: int = 0


class QuantizeDequantize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, encoding_min, encoding_max, bitwidth):
        steps = 2**bitwidth - 1
        scale = (encoding_max - encoding_min).clamp(min=1e-8) / steps
        offset = torch.round(encoding_min / scale)
        quantized = torch.clamp(torch.round(tensor / scale) - offset, 0, steps)
        ctx.save_for_backward(tensor, encoding_min, encoding_max)
        return (quantized + offset) * scale

    @staticmethod
    def backward(ctx, grad_output):
        tensor, encoding_min, encoding_max = ctx.saved_tensors
        mask = (tensor >= encoding_min) & (tensor <= encoding_max)
        return grad_output * mask, None, None, None


class TensorQuantizer(nn.Module):
    def __init__(self, bitwidth):
        super().__init__()
        self.bitwidth = bitwidth
        self.encoding_min = None
        self.encoding_max = None
        self._stats_min = None
        self._stats_max = None

    def update_stats(self, tensor):
        cur_min, cur_max = tensor.min().reshape(1), tensor.max().reshape(1)
        self._stats_min = cur_min if self._stats_min is None else torch.minimum(self._stats_min, cur_min)
        self._stats_max = cur_max if self._stats_max is None else torch.maximum(self._stats_max, cur_max)

    def compute_encoding(self):
        self.encoding_min = torch.clamp(self._stats_min, max=0.0)
        self.encoding_max = torch.clamp(self._stats_max, min=0.0)

    def quantize_dequantize(self, tensor):
        if self.encoding_min is None:
            return tensor
        return QuantizeDequantize.apply(tensor, self.encoding_min, self.encoding_max, self.bitwidth)


class QcQuantizeWrapper(nn.Module):
    def __init__(self, layer, cfg):
        super().__init__()
        self._module_to_wrap = layer
        self.output_quantizer = TensorQuantizer(cfg.output_bw)
        self.calibrating = False

    def forward(self, x):
        out = self._module_to_wrap(x)
        if self.calibrating:
            self.output_quantizer.update_stats(out)
            return out
        return self.output_quantizer.quantize_dequantize(out)


class QuantizationSimModel:
    def __init__(self, model, cfg):
        self.cfg = cfg
        self.model = model
        self.wrappers = []
        for name, child in list(model.named_children()):
            if isinstance(child, (nn.Conv2d, nn.Linear)):
                wrapper = QcQuantizeWrapper(child, cfg)
                setattr(model, name, wrapper)
                self.wrappers.append(wrapper)

    def compute_encodings(self, forward_pass_callback, forward_pass_callback_args):
        for w in self.wrappers:
            w.calibrating = True
        forward_pass_callback(self.model, forward_pass_callback_args)
        for w in self.wrappers:
            w.calibrating = False
            w.output_quantizer.compute_encoding()


class SmallConvNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, stride=2)
        self.fc = nn.Linear(16 * 8 * 8, num_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.fc(x.flatten(1))


def calibration_forward(model, loader_and_batches):
    loader, num_batches = loader_and_batches
    for i, (x, _) in enumerate(loader):
        if i >= num_batches:
            break
        model(x)


class QATModule:
    def __init__(self, cfg, val_loader):
        self.cfg = cfg
        self.model = SmallConvNet()
        self.sim = QuantizationSimModel(self.model, cfg)
        self.val_loader = val_loader
        self.encodings_computed = False

    def configure_optimizers(self):
        return torch.optim.SGD(self.model.parameters(), lr=self.cfg.lr, momentum=0.9)

    def on_validation_start(self):
        if not self.encodings_computed:
            self.sim.compute_encodings(calibration_forward, (self.val_loader, self.cfg.num_calibration_batches))
            self.encodings_computed = True

    def training_step(self, batch):
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def validation_step(self, batch):
        x, y = batch
        return (self.model(x).argmax(dim=1) == y).float().mean()


class Trainer:
    def __init__(self, max_epochs, num_sanity_val_steps=2, inference_mode=True):
        self.max_epochs = max_epochs
        self.num_sanity_val_steps = num_sanity_val_steps
        self.inference_mode = inference_mode

    def _evaluation_context(self):
        return torch.inference_mode() if self.inference_mode else torch.no_grad()

    def _run_validation(self, module, loader, max_batches=None):
        module.model.eval()
        accs = []
        with self._evaluation_context():
            module.on_validation_start()
            for i, batch in enumerate(loader):
                if max_batches is not None and i >= max_batches:
                    break
                accs.append(module.validation_step(batch).item())
        module.model.train()
        return sum(accs) / max(len(accs), 1)

    def fit(self, module, train_loader, val_loader):
        optimizer = module.configure_optimizers()
        if self.num_sanity_val_steps > 0:
            self._run_validation(module, val_loader, self.num_sanity_val_steps)
        for epoch in range(self.max_epochs):
            module.model.train()
            for batch in train_loader:
                loss = module.training_step(batch)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            acc = self._run_validation(module, val_loader)
            print(f"epoch {epoch}: loss {loss.item():.4f} val_acc {acc:.3f}")


def main():
    cfg = QATConfig()
    torch.manual_seed(cfg.seed)
    x = torch.randn(96, 1, 16, 16)
    y = torch.randint(0, 10, (96,))
    train_loader = DataLoader(TensorDataset(x[:64], y[:64]), batch_size=cfg.batch_size, shuffle=True)
    val_loader = DataLoader(TensorDataset(x[64:], y[64:]), batch_size=cfg.batch_size)
    module = QATModule(cfg, val_loader)
    trainer = Trainer(max_epochs=cfg.max_epochs, num_sanity_val_steps=cfg.num_sanity_val_steps, inference_mode=False)
    trainer.fit(module, train_loader, val_loader)


if __name__ == "__main__":
    main()
