# expect: numpy_requires_grad
# source: https://github.com/utiasSTARS/liegroups/issues/4
import argparse
import math

import numpy as np  # for matrix determinant
import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------- liegroups.torch (SO2 subset)
def isclose(mat1, mat2, tol=1e-6):
    """Check element-wise if two tensors are close within some tolerance."""
    return (mat1 - mat2).abs_().lt(tol)


class SOMatrixBase(object):
    dim = None

    def __init__(self, mat):
        self.mat = mat

    @classmethod
    def from_matrix(cls, mat, normalize=False):
        mat_is_valid = cls.is_valid_matrix(mat)
        if mat_is_valid.all() or normalize:
            return cls(mat)
        else:
            raise ValueError("Invalid rotation matrix. Use normalize=True to handle rounding errors.")

    @classmethod
    def is_valid_matrix(cls, mat):
        if mat.dim() < 3:
            mat = mat.unsqueeze(dim=0)
        shape_check = torch.BoolTensor(mat.shape[0]).fill_(False)
        if mat.shape[1:3] != (cls.dim, cls.dim):
            return shape_check
        else:
            shape_check.fill_(True)

        # Determinants of each matrix in the batch should be 1
        det_check = isclose(mat.__class__(np.linalg.det(mat.cpu().numpy())), 1.)  # raises

        # The transpose of each matrix in the batch should be its inverse
        inv_check = isclose(mat.transpose(2, 1).bmm(mat),
                            torch.eye(cls.dim, dtype=mat.dtype)).sum(dim=1).sum(dim=1) \
            == cls.dim * cls.dim

        return shape_check & det_check & inv_check


class SO2(SOMatrixBase):
    dim = 2
    dof = 1

    def log(self):
        mat = self.mat.unsqueeze(dim=0) if self.mat.dim() < 3 else self.mat
        s = mat[:, 1, 0]
        c = mat[:, 0, 0]
        return torch.atan2(s, c)

    def to_angle(self):
        """Recover the rotation angle in rad from the rotation matrix."""
        return self.log()


# ---------------------------------------------------------------- DCP-style model (2D)
class PointNet(nn.Module):
    def __init__(self, emb_dims=64):
        super(PointNet, self).__init__()
        self.conv1 = nn.Conv1d(2, 32, kernel_size=1, bias=False)
        self.conv2 = nn.Conv1d(32, 64, kernel_size=1, bias=False)
        self.conv3 = nn.Conv1d(64, emb_dims, kernel_size=1, bias=False)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.conv3(x)


class SVDHead(nn.Module):
    def __init__(self, args):
        super(SVDHead, self).__init__()
        self.emb_dims = args.emb_dims
        self.reflect = torch.eye(2)
        self.reflect[1, 1] = -1

    def forward(self, src_embedding, tgt_embedding, src, tgt):
        d_k = src_embedding.size(1)
        scores = torch.matmul(src_embedding.transpose(2, 1).contiguous(), tgt_embedding) / math.sqrt(d_k)
        scores = torch.softmax(scores, dim=2)
        src_corr = torch.matmul(tgt, scores.transpose(2, 1).contiguous())

        src_centered = src - src.mean(dim=2, keepdim=True)
        src_corr_centered = src_corr - src_corr.mean(dim=2, keepdim=True)
        H = torch.matmul(src_centered, src_corr_centered.transpose(2, 1).contiguous())

        R = []
        for i in range(src.size(0)):
            u, s, vh = torch.linalg.svd(H[i])
            v = vh.transpose(1, 0)
            r = torch.matmul(v, u.transpose(1, 0).contiguous())
            if torch.det(r) < 0:
                v = torch.matmul(v, self.reflect)
                r = torch.matmul(v, u.transpose(1, 0).contiguous())
            R.append(r)
        R = torch.stack(R, dim=0)
        t = torch.matmul(-R, src.mean(dim=2, keepdim=True)) + src_corr.mean(dim=2, keepdim=True)
        return R, t.view(src.size(0), 2)


class DCP(nn.Module):
    def __init__(self, args):
        super(DCP, self).__init__()
        self.emb_nn = PointNet(emb_dims=args.emb_dims)
        self.head = SVDHead(args=args)

    def forward(self, src, tgt):
        src_embedding = self.emb_nn(src)
        tgt_embedding = self.emb_nn(tgt)
        rotation_ab, translation_ab = self.head(src_embedding, tgt_embedding, src, tgt)
        return rotation_ab, translation_ab


# ---------------------------------------------------------------- data / training
def make_batch(batch_size, num_points, factor, generator):
    src = torch.rand(batch_size, 2, num_points, generator=generator) - 0.5
    angle_ab = (torch.rand(batch_size, generator=generator) * 2 - 1) * math.pi / factor
    c, s = torch.cos(angle_ab), torch.sin(angle_ab)
    rotation_ab = torch.stack([torch.stack([c, -s], 1), torch.stack([s, c], 1)], 1)
    translation_ab = torch.rand(batch_size, 2, generator=generator) - 0.5
    tgt = torch.matmul(rotation_ab, src) + translation_ab.unsqueeze(2)
    perm = torch.randperm(num_points, generator=generator)
    return src, tgt[:, :, perm], angle_ab, translation_ab


def registration_loss(rotation_ab_pred, translation_ab_pred, angle_ab, translation_ab):
    rvec_ab_pred = SO2.from_matrix(rotation_ab_pred)
    angle_pred = rvec_ab_pred.to_angle()
    angle_err = torch.atan2(torch.sin(angle_pred - angle_ab), torch.cos(angle_pred - angle_ab))
    return (angle_err ** 2).mean() + F.mse_loss(translation_ab_pred, translation_ab)


def train_one_epoch(args, net, opt, generator):
    net.train()
    total_loss, num_examples = 0.0, 0
    for _ in range(args.batches_per_epoch):
        src, tgt, angle_ab, translation_ab = make_batch(args.batch_size, args.num_points, args.factor, generator)
        opt.zero_grad()
        rotation_ab_pred, translation_ab_pred = net(src, tgt)
        loss = registration_loss(rotation_ab_pred, translation_ab_pred, angle_ab, translation_ab)
        loss.backward()
        opt.step()
        total_loss += loss.item() * args.batch_size
        num_examples += args.batch_size
    return total_loss / num_examples


def main():
    parser = argparse.ArgumentParser(description='Point Cloud Registration (2D)')
    parser.add_argument('--emb_dims', type=int, default=64)
    parser.add_argument('--batch_size', type=int, default=8)
    parser.add_argument('--epochs', type=int, default=3)
    parser.add_argument('--batches_per_epoch', type=int, default=4)
    parser.add_argument('--lr', type=float, default=0.001)
    parser.add_argument('--num_points', type=int, default=64)
    parser.add_argument('--factor', type=float, default=4)
    parser.add_argument('--seed', type=int, default=1234)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    net = DCP(args)
    opt = torch.optim.Adam(net.parameters(), lr=args.lr, weight_decay=1e-4)
    for epoch in range(args.epochs):
        train_loss = train_one_epoch(args, net, opt, generator)
        print('EPOCH:: %d, Loss: %f' % (epoch, train_loss))


if __name__ == '__main__':
    main()
