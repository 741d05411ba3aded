# expect: clean
# source: https://github.com/mrdbourke/pytorch-deep-learning/issues/583
"""TinyVGG baseline on a small synthetic image dataset: train/test loops that
collect per-epoch metrics in a results dict, then summarise the loss curves."""
import numpy as np
import torch
from torch import nn

torch.manual_seed(42)

X = torch.randn(64, 3, 16, 16)
y = torch.randint(0, 3, (64,))
train_batches = [(X[i:i + 16], y[i:i + 16]) for i in range(0, 48, 16)]
test_batches = [(X[48:], y[48:])]

model_0 = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(8 * 4 * 4, 3))
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model_0.parameters(), lr=0.001)


def train_step(model, dataloader, loss_fn, optimizer):
    model.train()
    train_loss, train_acc = 0, 0
    for X_b, y_b in dataloader:
        y_pred = model(X_b)
        loss = loss_fn(y_pred, y_b)
        train_loss += loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        y_pred_class = torch.argmax(torch.softmax(y_pred, dim=1), dim=1)
        train_acc += (y_pred_class == y_b).sum().item() / len(y_pred)
    return train_loss / len(dataloader), train_acc / len(dataloader)


def test_step(model, dataloader, loss_fn):
    model.eval()
    test_loss, test_acc = 0, 0
    with torch.inference_mode():
        for X_b, y_b in dataloader:
            test_pred_logits = model(X_b)
            test_loss += loss_fn(test_pred_logits, y_b).item()
            test_acc += (test_pred_logits.argmax(dim=1) == y_b).sum().item() / len(test_pred_logits)
    return test_loss / len(dataloader), test_acc / len(dataloader)


def train(model, train_dataloader, test_dataloader, optimizer, loss_fn, epochs=3):
    results = {"train_loss": [], "train_acc": [], "test_loss": [], "test_acc": []}
    for epoch in range(epochs):
        train_loss, train_acc = train_step(model, train_dataloader, loss_fn, optimizer)
        test_loss, test_acc = test_step(model, test_dataloader, loss_fn)
        print(f"Epoch: {epoch + 1} | train_loss: {train_loss:.4f} | test_loss: {test_loss:.4f}")
        results["train_loss"].append(train_loss)
        results["train_acc"].append(train_acc)
        results["test_loss"].append(test_loss)
        results["test_acc"].append(test_acc)
    return results


def plot_loss_curves(results):
    loss = np.array(results["train_loss"])
    test_loss = np.array(results["test_loss"])
    epochs = np.arange(len(loss))
    for e, l, tl in zip(epochs, loss, test_loss):
        print(f"epoch {e}: train {'#' * int(l * 10)} {l:.3f} | test {tl:.3f}")


model_0_results = train(model_0, train_batches, test_batches, optimizer, loss_fn, epochs=3)
plot_loss_curves(model_0_results)
