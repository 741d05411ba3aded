# expect: clean
# shape: done or loss.backward(): the backward runs only when done is false, so the later backward is
# not surely a second one
import json
import torch

w = torch.zeros(3, requires_grad=True)
done = json.loads("true")
loss = (w * 2).sum()
done or loss.backward()   # backward only when not done
loss.backward()
