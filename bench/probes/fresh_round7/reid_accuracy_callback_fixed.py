# expect: clean
# source: https://github.com/Lightning-AI/torchmetrics/issues/1993
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

class MulticlassAccuracy:
    """Cut-down torchmetrics MulticlassAccuracy (macro) with tp/support states."""
    def __init__(self, num_classes):
        self.num_classes = num_classes
        self.reset()

    def reset(self):
        self.tp = torch.zeros(self.num_classes)
        self.support = torch.zeros(self.num_classes)

    def update(self, preds, target):
        hits = (preds.argmax(dim=1) == target).float()
        self.tp += torch.bincount(target, weights=hits, minlength=self.num_classes)
        self.support += torch.bincount(target, minlength=self.num_classes).float()

    def compute(self):
        return (self.tp / self.support.clamp(min=1)).mean()

class Accuracy:  # registered as a callback
    def __init__(self, metric, taskname=""):
        self.acc_metric = metric
        self.taskname = taskname
        self.ready = True

    def on_sanity_check_start(self, trainer, pl_module):
        self.ready = False

    def on_sanity_check_end(self, trainer, pl_module):
        self.ready = True

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        taskname = outputs["taskname"]
        if not self.ready or taskname != self.taskname:
            return
        x, pids = batch
        with torch.inference_mode():
            preds = outputs["pid_preds"]
            self.acc_metric.update(preds, pids)

    def on_validation_epoch_end(self, trainer, pl_module):
        if self.ready:
            print(f"{self.taskname}/acc", self.acc_metric.compute().item())
        self.acc_metric.reset()

def run_validation(model, callback, loader, sanity=False):
    # stand-in for the Lightning evaluation loop: step and epoch-end under inference_mode
    if sanity:
        callback.on_sanity_check_start(None, model)
    for batch_idx, (x, pids) in enumerate(loader):
        with torch.inference_mode():
            outputs = {"taskname": "reid", "pid_preds": model(x).softmax(dim=1)}
        callback.on_validation_batch_end(None, model, outputs, (x, pids), batch_idx)
    with torch.inference_mode():
        callback.on_validation_epoch_end(None, model)
    if sanity:
        callback.on_sanity_check_end(None, model)

batches = [(torch.randn(16, 32), torch.randint(0, 12, (16,))) for _ in range(12)]
train_loader, val_loader = batches[:8], batches[8:]
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 12))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
callback = Accuracy(MulticlassAccuracy(num_classes=12), taskname="reid")

run_validation(model, callback, val_loader[:2], sanity=True)
for epoch in range(2):
    for x, pids in train_loader:
        loss = F.cross_entropy(model(x), pids)
        opt.zero_grad()
        loss.backward()
        opt.step()
    run_validation(model, callback, val_loader)
