# expect: nonleaf_optimizer
# source: https://github.com/vinsis/ternary-quantization/issues/4
import torch
import torch.nn as nn

CONFIG = {
    "device": "cpu",
    "master_dtype": torch.float64,   # full-precision copies kept in double
    "threshold": 0.05,
    "lr_main": 1e-3,
    "lr_full_precision": 1e-5,
    "lr_scaling": 1e-5,
    "batch_size": 32,
    "num_batches": 6,
    "seed": 0,
}


class ConvNet(nn.Module):
    name = "quantized"

    def __init__(self, num_classes=10):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Conv2d(1, 8, 5, padding=2), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2))
        self.layer2 = nn.Sequential(nn.Conv2d(8, 16, 5, padding=2), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.fc = nn.Linear(16 * 4 * 4, num_classes)

    def forward(self, x):
        out = self.layer2(self.layer1(x))
        return self.fc(out.reshape(out.size(0), -1))


def quantize(full_precision, w_p, w_n, t):
    delta = t * full_precision.abs().max()
    a = (full_precision > delta).to(full_precision.dtype)
    b = (full_precision < -delta).to(full_precision.dtype)
    return w_p * a - w_n * b


def get_quantization_grads(grad, full_precision, w_p, w_n, t):
    delta = t * full_precision.abs().max()
    a = (full_precision > delta).to(grad.dtype)
    b = (full_precision < -delta).to(grad.dtype)
    c = torch.ones_like(grad) - a - b
    full_precision_grad = w_p * a * grad + w_n * b * grad + 1.0 * c * grad
    w_p_grad = (a * grad).sum().item()
    w_n_grad = (b * grad).sum().item()
    return full_precision_grad, w_p_grad, w_n_grad


def split_parameters(model):
    bn_weights = [p for name, p in model.named_parameters() if ".1." in name]
    to_quantize = [p for name, p in model.named_parameters() if ".1." not in name]
    return bn_weights, to_quantize


def make_full_precision_copies(weights, cfg):
    return [p.detach().clone().to(cfg["device"], cfg["master_dtype"]).requires_grad_() for p in weights]


def make_scaling_factors(n, cfg):
    return [torch.ones(2, requires_grad=True).to(cfg["device"], cfg["master_dtype"]) for _ in range(n)]


def synthetic_batches(cfg):
    g = torch.Generator().manual_seed(cfg["seed"])
    for _ in range(cfg["num_batches"]):
        images = torch.randn(cfg["batch_size"], 1, 16, 16, generator=g)
        labels = torch.randint(0, 10, (cfg["batch_size"],), generator=g)
        images[:, 0, :4, :4] += labels.view(-1, 1, 1).float() / 5.0
        yield images.to(cfg["device"]), labels.to(cfg["device"])


class TernaryTrainer:
    def __init__(self, model, cfg):
        self.model = model.to(cfg["device"])
        self.cfg = cfg
        self.criterion = nn.CrossEntropyLoss()
        self.bn_weights, self.weights_to_be_quantized = split_parameters(self.model)
        self.full_precision_copies = make_full_precision_copies(self.weights_to_be_quantized, cfg)
        self.scaling_factors = make_scaling_factors(len(self.weights_to_be_quantized), cfg)
        self.optimizer = self.build_optimizer()

    def build_optimizer(self):
        cfg = self.cfg
        optimizer = torch.optim.Adam(
            [{"params": self.bn_weights}, {"params": self.weights_to_be_quantized}], lr=cfg["lr_main"])
        optimizer.add_param_group({"params": self.full_precision_copies, "lr": cfg["lr_full_precision"]})
        optimizer.add_param_group({"params": self.scaling_factors, "lr": cfg["lr_scaling"]})  # raises
        return optimizer

    def quantize_weights(self):
        t = self.cfg["threshold"]
        with torch.no_grad():
            for index, weight in enumerate(self.weights_to_be_quantized):
                w_p, w_n = self.scaling_factors[index]
                q = quantize(self.full_precision_copies[index], w_p, w_n, t)
                weight.copy_(q.to(weight.dtype))

    def set_quantization_grads(self):
        t = self.cfg["threshold"]
        for index, weight in enumerate(self.weights_to_be_quantized):
            w_p, w_n = self.scaling_factors[index]
            fp = self.full_precision_copies[index]
            fp_grad, w_p_grad, w_n_grad = get_quantization_grads(
                weight.grad.to(fp.dtype), fp.detach(), w_p.item(), w_n.item(), t)
            fp.grad = fp_grad
            self.scaling_factors[index].grad = torch.tensor([w_p_grad, w_n_grad], dtype=fp.dtype)
            weight.grad.zero_()

    def train(self):
        self.model.train()
        for i, (images, labels) in enumerate(synthetic_batches(self.cfg)):
            self.quantize_weights()
            loss = self.criterion(self.model(images), labels)
            self.optimizer.zero_grad()
            loss.backward()
            self.set_quantization_grads()
            self.optimizer.step()
            print("Iteration {}, loss: {:.4f}".format(i + 1, loss.item()))


if __name__ == "__main__":
    torch.manual_seed(CONFIG["seed"])
    trainer = TernaryTrainer(ConvNet(), CONFIG)
    assert trainer.full_precision_copies[0].requires_grad is True
    assert len(trainer.weights_to_be_quantized) == len(trainer.scaling_factors)
    trainer.train()
    print([sf.detach().tolist() for sf in trainer.scaling_factors])
