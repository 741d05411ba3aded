# expect: clean
# shape: a pose refinement multiplies a learned rotation into a slice of the poses under CPU bfloat16 autocast, then writes the product back into the poses in place: matmul runs in lower precision and saved a bfloat16 copy of the slice, which the write does not touch
import torch

poses = torch.randn(1, 3, 4)
rotation = torch.randn(1, 3, 3, requires_grad=True)
optimizer = torch.optim.SGD([rotation], lr=0.1)
with torch.autocast("cpu", dtype=torch.bfloat16):
    poses[..., :3] = rotation @ poses[..., :3]
    loss = poses.float().pow(2).mean()
optimizer.zero_grad()
loss.backward()
optimizer.step()
