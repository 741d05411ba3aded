# expect: no_grad_fn
# source: https://github.com/abhuse/polyloss-pytorch/issues/4
"""Usage example / smoke test for the Poly-1 losses: a classification batch
through Poly1CrossEntropyLoss and a segmentation batch through Poly1FocalLoss,
each followed by a backward pass."""
import torch

from polyloss import Poly1CrossEntropyLoss, Poly1FocalLoss

torch.manual_seed(0)

# Poly1 Cross-Entropy Loss
# classification task
batch_size = 10
num_classes = 5
logits = torch.rand([batch_size, num_classes])
labels = torch.randint(0, num_classes, [batch_size])
loss = Poly1CrossEntropyLoss(num_classes=num_classes,
                             reduction='mean')
out = loss(logits, labels)
out.backward()  # raises
print("poly1 CE: %.4f  grad norm: %.4f" % (out.item(), logits.grad.norm().item()))

# Poly1 Focal Loss
# segmentation task
H, W = 4, 7
logits = torch.rand([batch_size, num_classes, H, W])
labels = torch.randint(0, num_classes, [batch_size, H, W])
loss = Poly1FocalLoss(num_classes=num_classes,
                      reduction='mean')
out = loss(logits, labels)
out.backward()
print("poly1 focal: %.4f  grad norm: %.4f" % (out.item(), logits.grad.norm().item()))
