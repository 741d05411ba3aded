# expect: clean
# source: https://github.com/hhsecond/HandsOnDeepLearningWithPytorch/issues/2
# numpy_like_fizbuz.py: two-layer net written with raw tensors, dtype picked from the device.
import numpy as np
import torch

torch.manual_seed(0)
np.random.seed(0)

input_size, hidden_size, output_size = 10, 100, 4
epochs, batches, lr = 30, 64, 0.01


def binary_encoder(n, size=input_size):
    return np.array([n >> d & 1 for d in range(size)])


def fizbuz_label(n):
    if n % 15 == 0:
        return [1, 0, 0, 0]
    if n % 5 == 0:
        return [0, 1, 0, 0]
    if n % 3 == 0:
        return [0, 0, 1, 0]
    return [0, 0, 0, 1]


def get_data():
    nums = np.arange(101, 1024)
    return (np.stack([binary_encoder(n) for n in nums]).astype(np.float64),
            np.array([fizbuz_label(n) for n in nums], dtype=np.float64))


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
dtype = torch.float32 if torch.cuda.is_available() else torch.float64

trX, trY = get_data()
x = torch.from_numpy(trX).to(device=device, dtype=dtype)
y = torch.from_numpy(trY).to(device=device, dtype=dtype)

w1 = torch.randn(input_size, hidden_size, dtype=dtype, device=device, requires_grad=True)
w1.requires_grad = True
w2 = torch.randn(hidden_size, output_size, dtype=dtype, device=device, requires_grad=True)
w2.requires_grad = True
b1 = torch.zeros(1, hidden_size, dtype=dtype, device=device, requires_grad=True)
b1.requires_grad = True
b2 = torch.zeros(1, output_size, dtype=dtype, device=device, requires_grad=True)
b2.requires_grad = True

no_of_batches = len(trX) // batches
for epoch in range(epochs):
    for batch in range(no_of_batches):
        start, end = batch * batches, (batch + 1) * batches
        x_, y_ = x[start:end], y[start:end]
        hyp = (x_.matmul(w1).add(b1).sigmoid()).matmul(w2).add(b2).sigmoid()
        output = (hyp - y_).pow(2).sum() / 2.0
        output.backward()
        with torch.no_grad():
            for p in (w1, w2, b1, b2):
                p -= lr * p.grad
                p.grad.zero_()
    if epoch % 10 == 0:
        print(epoch, output.item())
