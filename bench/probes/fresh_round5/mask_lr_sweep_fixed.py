# expect: clean
# source: https://github.com/source-separation/tutorial/issues/28
import numpy as np
import torch

torch.manual_seed(0)
np.random.seed(0)

# Toy separation problem: learn a per-frequency mask that pulls the vocals
# out of a mixture magnitude spectrogram.
n_frames, n_freq = 64, 32
vocals = torch.rand(n_frames, n_freq)
accomp = torch.rand(n_frames, n_freq) * 0.5
mixture = vocals + accomp
ideal_mask = vocals / (mixture + 1e-8)

LEARNING_RATES = [1e-3, 1e-2, 1e-1, 1.0]
N_ITERATIONS = 50

grad_norms = [[] for _ in LEARNING_RATES]
losses = [[] for _ in LEARNING_RATES]

for j, lr in enumerate(LEARNING_RATES):
    mask_logits = torch.zeros(n_freq, requires_grad=True)
    for i in range(N_ITERATIONS):
        mask = torch.sigmoid(mask_logits)
        estimate = mixture * mask
        loss = torch.nn.functional.l1_loss(estimate, vocals)
        loss.backward()

        with torch.no_grad():
            mask_logits -= lr * mask_logits.grad
        grad_norms[j].append(mask_logits.grad.norm().item())
        mask_logits.grad.zero_()

        losses[j].append(loss.item())

    print(f"lr={lr}: final loss {losses[j][-1]:.4f}")

# Signs of healthy training: gradient norm and log-loss curves per learning rate
for j, lr in enumerate(LEARNING_RATES):
    log_loss = np.log10(losses[j])
    gn = np.array(grad_norms[j])
    print(f"lr={lr}: grad norm {gn[0]:.4f} -> {gn[-1]:.4f}, "
          f"log10(loss) {log_loss[0]:.3f} -> {log_loss[-1]:.3f}")

best = int(np.argmin([l[-1] for l in losses]))
print("best learning rate:", LEARNING_RATES[best])
print("mask error vs ideal:", (torch.sigmoid(mask_logits) - ideal_mask.mean(0)).abs().mean().item())
