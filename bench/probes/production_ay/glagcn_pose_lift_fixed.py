# expect: clean
# source: https://github.com/bruceyo/GLA-GCN/issues/5
"""GLA-GCN style 2D-to-3D human pose lifting (Human3.6M skeleton, 17 joints).

VideoPose3D-derived layout: argparse options (`-arc`, `--dropout`, `--channels`, `-lr`, `-lrd`,
...), a skeleton `Graph` with spatial adjacency, adaptive graph convolution units
(`unit_gcn`, `unit_tcn`, `TCN_GCN_unit`), `TemporalModelBase` / `S_AGCN` with strided
temporal blocks and a per-joint regression head, an MPJPE loss, a chunked generator over
synthetic 2D/3D sequences, a train loop with lr and BN-momentum decay, and an evaluation
model that receives the training weights each epoch. CPU only.
"""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Training script")
    parser.add_argument("-arc", "--architecture", default="3,3", type=str, metavar="LAYERS")
    parser.add_argument("--channels", default=16, type=int)
    parser.add_argument("-drop", "--dropout", default=0.25, type=float)
    parser.add_argument("-lr", "--learning-rate", default=1e-3, type=float)
    parser.add_argument("-lrd", "--lr-decay", default=0.95, type=float)
    parser.add_argument("-e", "--epochs", default=2, type=int)
    parser.add_argument("-b", "--batch-size", default=8, type=int)
    parser.add_argument("--dataset", default="h36m", type=str)
    parser.add_argument("--seed", default=1234, type=int)
    return parser.parse_args(argv)


# ----------------------------------------------------------------------------- graph
def edge2mat(link, num_node):
    A = np.zeros((num_node, num_node))
    for i, j in link:
        A[j, i] = 1
    return A


def normalize_digraph(A):
    Dl = np.sum(A, 0)
    Dn = np.diag([d ** (-1) if d > 0 else 0 for d in Dl])
    return np.dot(A, Dn)


class Graph:
    def __init__(self, dataset="h36m"):
        num_node = 17
        inward_ori_index = [(1, 0), (2, 1), (3, 2), (4, 0), (5, 4), (6, 5), (7, 0), (8, 7),
                            (9, 8), (10, 9), (11, 8), (12, 11), (13, 12), (14, 8), (15, 14), (16, 15)]
        self.num_node = num_node
        self.self_link = [(i, i) for i in range(num_node)]
        self.inward = inward_ori_index
        self.outward = [(j, i) for (i, j) in self.inward]
        I = edge2mat(self.self_link, num_node)
        In = normalize_digraph(edge2mat(self.inward, num_node))
        Out = normalize_digraph(edge2mat(self.outward, num_node))
        self.A = np.stack((I, In, Out))


def conv_init(conv):
    nn.init.kaiming_normal_(conv.weight, mode="fan_out")
    nn.init.constant_(conv.bias, 0)


def bn_init(bn, scale):
    nn.init.constant_(bn.weight, scale)
    nn.init.constant_(bn.bias, 0)


# ----------------------------------------------------------------------------- layers
class unit_tcn(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size=9, stride=1):
        super(unit_tcn, self).__init__()
        pad = int((kernel_size - 1) / 2)
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=(kernel_size, 1), padding=(pad, 0), stride=(stride, 1))
        self.bn = nn.BatchNorm2d(out_channels)
        conv_init(self.conv)
        bn_init(self.bn, 1)

    def forward(self, x):
        return self.bn(self.conv(x))


class unit_gcn(nn.Module):
    def __init__(self, in_channels, out_channels, A, coff_embedding=4, num_subset=3):
        super(unit_gcn, self).__init__()
        self.inter_c = max(out_channels // coff_embedding, 3)
        self.PA = nn.Parameter(torch.from_numpy(A.astype(np.float32)))
        nn.init.constant_(self.PA, 1e-6)
        self.register_buffer("A", torch.from_numpy(A.astype(np.float32)))
        self.num_subset = num_subset
        self.conv_a = nn.ModuleList([nn.Conv2d(in_channels, self.inter_c, 1) for _ in range(num_subset)])
        self.conv_b = nn.ModuleList([nn.Conv2d(in_channels, self.inter_c, 1) for _ in range(num_subset)])
        self.conv_d = nn.ModuleList([nn.Conv2d(in_channels, out_channels, 1) for _ in range(num_subset)])
        if in_channels != out_channels:
            self.down = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1), nn.BatchNorm2d(out_channels))
        else:
            self.down = lambda x: x
        self.bn = nn.BatchNorm2d(out_channels)
        self.soft = nn.Softmax(-2)
        self.relu = nn.ReLU()
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                conv_init(m)
            elif isinstance(m, nn.BatchNorm2d):
                bn_init(m, 1)
        bn_init(self.bn, 1e-6)
        self.drop = nn.Dropout(0.1, inplace=True)

    def forward(self, x):
        N, C, T, V = x.size()
        A = self.A + self.PA
        y = None
        for i in range(self.num_subset):
            A1 = self.conv_a[i](x).permute(0, 3, 1, 2).contiguous().view(N, V, self.inter_c * T)
            A2 = self.conv_b[i](x).view(N, self.inter_c * T, V)
            A1 = self.soft(torch.matmul(A1, A2) / A1.size(-1)) + A[i]  # N V V
            z = self.conv_d[i](torch.matmul(x.view(N, C * T, V), A1).view(N, C, T, V))
            y = z + y if y is not None else z
        y = self.drop(self.bn(y))
        y += self.down(x)
        return self.relu(y)


class TCN_GCN_unit(nn.Module):
    def __init__(self, in_channels, out_channels, A, stride=1, residual=True):
        super(TCN_GCN_unit, self).__init__()
        self.gcn1 = unit_gcn(in_channels, out_channels, A)
        self.tcn1 = unit_tcn(out_channels, out_channels, stride=stride)
        self.relu = nn.ReLU()
        if not residual:
            self.residual = lambda x: 0
        elif (in_channels == out_channels) and (stride == 1):
            self.residual = lambda x: x
        else:
            self.residual = unit_tcn(in_channels, out_channels, kernel_size=1, stride=stride)

    def forward(self, x):
        x = self.tcn1(self.gcn1(x)) + self.residual(x)
        return self.relu(x).clone()


# ----------------------------------------------------------------------------- model
class TemporalModelBase(nn.Module):
    """ Do not instantiate this class. """

    def __init__(self, num_joints_in, in_features, num_joints_out, filter_widths, causal, dropout, channels):
        super().__init__()
        for fw in filter_widths:
            assert fw % 2 != 0, "Only odd filter widths are supported"
        self.num_joints_in, self.in_features, self.num_joints_out = num_joints_in, in_features, num_joints_out
        self.filter_widths = filter_widths
        self.drop = nn.Dropout(dropout, inplace=True)
        self.pad = [filter_widths[0] // 2]

    def receptive_field(self):
        return 1 + 2 * sum(self.pad[:len(self.filter_widths)])

    def forward(self, x):
        assert len(x.shape) == 4 and x.shape[-2] == self.num_joints_in and x.shape[-1] == self.in_features
        sz = x.shape[:3]
        x = x.view(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
        x = self._forward_blocks(x)
        return x.permute(0, 2, 1).reshape(sz[0], -1, self.num_joints_out, 3)


class S_AGCN(TemporalModelBase):
    def __init__(self, num_joints_in, in_features, num_joints_out, filter_widths, causal=False,
                 dropout=0.25, channels=96, dataset="h36m"):
        super().__init__(num_joints_in, in_features, num_joints_out, filter_widths, causal, dropout, channels)
        self.graph = Graph(dataset)
        A = self.graph.A
        self.data_bn = nn.BatchNorm1d(in_features * num_joints_in)
        self.expand_gcn = TCN_GCN_unit(2, channels, A)
        self.causal_shift, layers_tcngcn = [], []
        next_dilation = filter_widths[0]
        for i in range(len(filter_widths)):
            self.pad.append((filter_widths[i] - 1) * next_dilation // 2)
            self.causal_shift.append((filter_widths[i] // 2 * next_dilation) if causal else 0)
            layers_tcngcn.append(TCN_GCN_unit(channels, channels, A))
            layers_tcngcn.append(TCN_GCN_unit(channels, channels, A, stride=filter_widths[i], residual=False))
            next_dilation *= filter_widths[i]
        self.layers_tcngcn = nn.ModuleList(layers_tcngcn)
        self.fc = nn.Conv1d(channels, 3, 1)

    def set_bn_momentum(self, momentum):
        self.data_bn.momentum = momentum
        for layer in [self.expand_gcn, *self.layers_tcngcn]:
            layer.gcn1.bn.momentum = momentum
            layer.tcn1.bn.momentum = momentum

    def _forward_blocks(self, x):
        N, V, T = x.size()
        v = V // 2  # number of 2D pose joints
        x = self.data_bn(x).view(N, 1, v, 2, T).permute(0, 1, 3, 4, 2).contiguous().view(N, 2, T, v)
        x = self.expand_gcn(x)
        for i in range(len(self.pad) - 1):
            res = x[:, :, self.causal_shift[i] + self.filter_widths[i] // 2:: self.filter_widths[i], :]
            x = self.drop(self.layers_tcngcn[2 * i](x))
            x = self.drop(self.layers_tcngcn[2 * i + 1](x))
            x = res + x
        pose_3d = torch.zeros(N, 3, v)
        for i in range(v):
            pose_joint_3d = self.fc(x[:, :, :, i].mean(2).view(N, -1, 1))
            pose_3d[:, :, i] = pose_joint_3d.view(N, -1)
        return pose_3d


def mpjpe(predicted, target):
    assert predicted.shape == target.shape
    return torch.mean(torch.norm(predicted - target, dim=len(target.shape) - 1))


# ----------------------------------------------------------------------------- data
class ChunkedGenerator:
    def __init__(self, batch_size, poses_3d, poses_2d, pad, shuffle=True, seed=1234):
        self.batch_size, self.poses_3d, self.poses_2d, self.pad = batch_size, poses_3d, poses_2d, pad
        self.shuffle, self.random = shuffle, np.random.RandomState(seed)
        self.pairs = [(s, t) for s in range(len(poses_2d)) for t in range(poses_2d[s].shape[0])]

    def num_batches(self):
        return math.ceil(len(self.pairs) / self.batch_size)

    def next_epoch(self):
        pairs = self.random.permutation(self.pairs) if self.shuffle else self.pairs
        for b in range(self.num_batches()):
            chunk = pairs[b * self.batch_size:(b + 1) * self.batch_size]
            batch_2d, batch_3d = [], []
            for s, t in chunk:
                seq = np.pad(self.poses_2d[s], ((self.pad, self.pad), (0, 0), (0, 0)), "edge")
                batch_2d.append(seq[t:t + 2 * self.pad + 1])
                batch_3d.append(self.poses_3d[s][t:t + 1])
            yield np.stack(batch_3d).astype("float32"), np.stack(batch_2d).astype("float32")


def make_sequences(n_seq, length, rng):
    poses_3d, poses_2d = [], []
    for _ in range(n_seq):
        p3 = np.cumsum(rng.randn(length, 17, 3) * 0.01, axis=0) + rng.randn(1, 17, 3) * 0.2
        poses_3d.append(p3)
        poses_2d.append(p3[..., :2] / (p3[..., 2:] + 5.0))
    return poses_3d, poses_2d


# ----------------------------------------------------------------------------- main
def evaluate(model_pos, generator):
    with torch.no_grad():
        model_pos.eval()
        errs = [mpjpe(model_pos(torch.from_numpy(b2d)), torch.from_numpy(b3d)).item() * b3d.shape[0]
                for b3d, b2d in generator.next_epoch()]
    return sum(errs) / len(generator.pairs)


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    rng = np.random.RandomState(args.seed)
    filter_widths = [int(x) for x in args.architecture.split(",")]
    model_pos_train = S_AGCN(17, 2, 17, filter_widths=filter_widths, dropout=args.dropout, channels=args.channels)
    model_pos = S_AGCN(17, 2, 17, filter_widths=filter_widths, dropout=args.dropout, channels=args.channels)
    pad = (model_pos.receptive_field() - 1) // 2
    print("INFO: Receptive field: {} frames".format(model_pos.receptive_field()))

    train_gen = ChunkedGenerator(args.batch_size, *make_sequences(2, 12, rng), pad=pad, seed=args.seed)
    test_gen = ChunkedGenerator(args.batch_size, *make_sequences(1, 8, rng), pad=pad, shuffle=False)
    optimizer = torch.optim.Adam(model_pos_train.parameters(), lr=args.learning_rate, amsgrad=True)
    lr, initial_momentum, final_momentum = args.learning_rate, 0.1, 0.001

    for epoch in range(args.epochs):
        epoch_loss, n = 0.0, 0
        model_pos_train.train()
        for batch_3d, batch_2d in train_gen.next_epoch():
            inputs_3d, inputs_2d = torch.from_numpy(batch_3d), torch.from_numpy(batch_2d)
            inputs_3d[:, :, 0] = 0  # root-relative
            optimizer.zero_grad()
            predicted_3d_pos = model_pos_train(inputs_2d)
            loss_3d_pos = mpjpe(predicted_3d_pos, inputs_3d)
            loss_3d_pos.backward()
            optimizer.step()
            epoch_loss += inputs_3d.shape[0] * loss_3d_pos.item()
            n += inputs_3d.shape[0]
        model_pos.load_state_dict(model_pos_train.state_dict())
        test_err = evaluate(model_pos, test_gen)
        lr *= args.lr_decay
        for param_group in optimizer.param_groups:
            param_group["lr"] *= args.lr_decay
        momentum = initial_momentum * np.exp(-(epoch + 1) / args.epochs * np.log(initial_momentum / final_momentum))
        model_pos_train.set_bn_momentum(momentum)
        print("[{}] lr {:.6f} 3d_train {:.3f} mm 3d_eval {:.3f} mm".format(epoch + 1, lr, epoch_loss / n * 1000, test_err * 1000))


if __name__ == "__main__":
    main([])
