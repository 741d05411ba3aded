# expect: inplace_version
# shape: the same pose refinement with autocast disabled (enabled=False): matmul saved the slice of the poses itself, which the write back then modifies in place
import torch

poses = torch.randn(1, 3, 4)
rotation = torch.randn(1, 3, 3, requires_grad=True)
optimizer = torch.optim.SGD([rotation], lr=0.1)
with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
    poses[..., :3] = rotation @ poses[..., :3]
    loss = poses.float().pow(2).mean()
optimizer.zero_grad()
loss.backward()  # raises
optimizer.step()
