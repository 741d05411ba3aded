# expect: clean
# source: https://github.com/BinLiang-NLP/InterGCN-ABSA/issues/4
"""InterGCN / AFGCN for aspect-based sentiment analysis (graph convolution over dependency
and aspect-interaction graphs on top of a BiLSTM).

Same layout as the project: argparse hyper-parameters with model/optimizer/initializer lookup
tables, a `DynamicLSTM` that packs padded sequences, `GraphConvolution`, the AFGCN and INTERGCN
models with position weighting and aspect masking, a bucket iterator, and an `Instructor` with
`_reset_params`, `_train`, `_evaluate_acc_f1` and `run` (repeats). Synthetic sentences with
random dependency / aspect graphs, CPU only.
"""
import argparse
import math
import random

import numpy
import torch
import torch.nn as nn
import torch.nn.functional as F


class DynamicLSTM(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers=1, batch_first=True, bidirectional=False):
        super(DynamicLSTM, self).__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=batch_first, bidirectional=bidirectional)

    def forward(self, x, x_len):
        """ sort -> pack -> process -> unpack -> unsort """
        x_sort_idx = torch.sort(-x_len)[1].long()
        x_unsort_idx = torch.sort(x_sort_idx)[1].long()
        x_len = x_len[x_sort_idx]
        x = x[x_sort_idx]
        x_emb_p = nn.utils.rnn.pack_padded_sequence(x, x_len.cpu(), batch_first=True)
        out_pack, (ht, ct) = self.lstm(x_emb_p, None)
        out = nn.utils.rnn.pad_packed_sequence(out_pack, batch_first=True)[0]
        return out[x_unsort_idx], (ht, ct)


class GraphConvolution(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super(GraphConvolution, self).__init__()
        self.weight = nn.Parameter(torch.FloatTensor(in_features, out_features))
        self.bias = nn.Parameter(torch.FloatTensor(out_features)) if bias else None

    def forward(self, text, adj):
        hidden = torch.matmul(text, self.weight)
        denom = torch.sum(adj, dim=2, keepdim=True) + 1
        output = torch.matmul(adj, hidden) / denom
        return output + self.bias if self.bias is not None else output


class GCNBase(nn.Module):
    def __init__(self, embedding_matrix, opt):
        super(GCNBase, self).__init__()
        self.opt = opt
        self.embed = nn.Embedding.from_pretrained(torch.tensor(embedding_matrix, dtype=torch.float))
        self.text_lstm = DynamicLSTM(opt.embed_dim, opt.hidden_dim, num_layers=1, batch_first=True, bidirectional=True)
        self.gc1 = GraphConvolution(2 * opt.hidden_dim, 2 * opt.hidden_dim)
        self.gc2 = GraphConvolution(2 * opt.hidden_dim, 2 * opt.hidden_dim)
        self.fc = nn.Linear(2 * opt.hidden_dim, opt.polarities_dim)
        self.text_embed_dropout = nn.Dropout(0.3)

    def position_weight(self, x, aspect_double_idx, text_len, aspect_len):
        batch_size, seq_len = x.shape[0], x.shape[1]
        aspect_double_idx, text_len, aspect_len = aspect_double_idx.cpu().numpy(), text_len.cpu().numpy(), aspect_len.cpu().numpy()
        weight = [[] for i in range(batch_size)]
        for i in range(batch_size):
            context_len = text_len[i] - aspect_len[i]
            for j in range(aspect_double_idx[i, 0]):
                weight[i].append(1 - (aspect_double_idx[i, 0] - j) / context_len)
            for j in range(aspect_double_idx[i, 0], aspect_double_idx[i, 1] + 1):
                weight[i].append(0)
            for j in range(aspect_double_idx[i, 1] + 1, text_len[i]):
                weight[i].append(1 - (j - aspect_double_idx[i, 1]) / context_len)
            for j in range(text_len[i], seq_len):
                weight[i].append(0)
        weight = torch.tensor(weight, dtype=torch.float).unsqueeze(2).to(self.opt.device)
        return weight * x

    def mask(self, x, aspect_double_idx):
        batch_size, seq_len = x.shape[0], x.shape[1]
        aspect_double_idx = aspect_double_idx.cpu().numpy()
        mask = [[1 if aspect_double_idx[i, 0] <= j <= aspect_double_idx[i, 1] else 0 for j in range(seq_len)]
                for i in range(batch_size)]
        mask = torch.tensor(mask).unsqueeze(2).float().to(self.opt.device)
        return mask * x

    def encode(self, text_indices, aspect_indices, left_indices):
        text_len = torch.sum(text_indices != 0, dim=-1)
        aspect_len = torch.sum(aspect_indices != 0, dim=-1)
        left_len = torch.sum(left_indices != 0, dim=-1)
        aspect_double_idx = torch.cat([left_len.unsqueeze(1), (left_len + aspect_len - 1).unsqueeze(1)], dim=1)
        text = self.text_embed_dropout(self.embed(text_indices))
        text_out, (_, _) = self.text_lstm(text, text_len)
        return text_out, aspect_double_idx, text_len, aspect_len

    def attend(self, x, text_out, aspect_double_idx):
        x = self.mask(x, aspect_double_idx)
        alpha_mat = torch.matmul(x, text_out.transpose(1, 2))
        alpha = F.softmax(alpha_mat.sum(1, keepdim=True), dim=2)
        x = torch.matmul(alpha, text_out).squeeze(1)
        return self.fc(x)


class AFGCN(GCNBase):
    def forward(self, inputs):
        text_indices, aspect_indices, left_indices, adj = inputs
        text_out, aspect_double_idx, text_len, aspect_len = self.encode(text_indices, aspect_indices, left_indices)
        x = F.relu(self.gc1(self.position_weight(text_out, aspect_double_idx, text_len, aspect_len), adj))
        x = F.relu(self.gc2(self.position_weight(x, aspect_double_idx, text_len, aspect_len), adj))
        return self.attend(x, text_out, aspect_double_idx)


class INTERGCN(GCNBase):
    def __init__(self, embedding_matrix, opt):
        super(INTERGCN, self).__init__(embedding_matrix, opt)
        self.gc3 = GraphConvolution(2 * opt.hidden_dim, 2 * opt.hidden_dim)
        self.gc4 = GraphConvolution(2 * opt.hidden_dim, 2 * opt.hidden_dim)

    def forward(self, inputs):
        text_indices, aspect_indices, left_indices, adj, d_adj = inputs
        text_out, aspect_double_idx, text_len, aspect_len = self.encode(text_indices, aspect_indices, left_indices)
        x = F.relu(self.gc1(self.position_weight(text_out, aspect_double_idx, text_len, aspect_len), adj))
        x = F.relu(self.gc2(self.position_weight(x, aspect_double_idx, text_len, aspect_len), adj))

        x_d = F.relu(self.gc3(self.position_weight(x, aspect_double_idx, text_len, aspect_len), d_adj))
        x_d = F.relu(self.gc4(self.position_weight(x_d, aspect_double_idx, text_len, aspect_len), d_adj))

        x = x + 0.2 * x_d
        return self.attend(x, text_out, aspect_double_idx)


# ----------------------------------------------------------------------------- data
def make_absa_dataset(n, vocab_size, max_len, rng):
    data = []
    for _ in range(n):
        length = rng.randint(6, max_len + 1)
        left = rng.randint(1, length - 2)
        a_len = rng.randint(1, 3)
        text = rng.randint(1, vocab_size, size=length)
        dep = (rng.rand(length, length) < 0.2).astype("float32")
        dep = numpy.maximum(dep, dep.T) + numpy.eye(length, dtype="float32")
        asp = numpy.zeros((length, length), dtype="float32")
        asp[:, left:left + a_len] = 1.0
        asp[left:left + a_len, :] = 1.0
        data.append({"text_indices": text, "aspect_indices": text[left:left + a_len], "left_indices": text[:left],
                     "dependency_graph": dep, "aspect_graph": asp, "polarity": rng.randint(0, 3)})
    return data


class BucketIterator(object):
    def __init__(self, data, batch_size, shuffle=True, seed=29):
        self.shuffle, self.batch_size, self.random = shuffle, batch_size, random.Random(seed)
        self.batches = self.sort_and_pad(sorted(data, key=lambda x: len(x["text_indices"])), batch_size)

    def sort_and_pad(self, data, batch_size):
        return [self.pad_data(data[i * batch_size:(i + 1) * batch_size]) for i in range(math.ceil(len(data) / batch_size))]

    @staticmethod
    def pad_data(batch_data):
        max_len = max(len(t["text_indices"]) for t in batch_data)
        out = {k: [] for k in batch_data[0]}
        for item in batch_data:
            for key in ("text_indices", "aspect_indices", "left_indices"):
                seq = item[key]
                out[key].append(numpy.pad(seq, (0, max_len - len(seq))))
            for key in ("dependency_graph", "aspect_graph"):
                g = item[key]
                out[key].append(numpy.pad(g, ((0, max_len - g.shape[0]), (0, max_len - g.shape[0]))))
            out["polarity"].append(item["polarity"])
        return {k: torch.tensor(numpy.array(v)) for k, v in out.items()}

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        if self.shuffle:
            self.random.shuffle(self.batches)
        return iter(self.batches)


def macro_f1(targets, preds, labels=(0, 1, 2)):
    f1s = []
    for c in labels:
        tp = numpy.sum((preds == c) & (targets == c))
        p = tp / max(numpy.sum(preds == c), 1)
        r = tp / max(numpy.sum(targets == c), 1)
        f1s.append(0.0 if p + r == 0 else 2 * p * r / (p + r))
    return float(numpy.mean(f1s))


# ----------------------------------------------------------------------------- instructor
class Instructor:
    def __init__(self, opt):
        self.opt = opt
        rng = numpy.random.RandomState(opt.seed)
        embedding_matrix = rng.randn(opt.vocab_size, opt.embed_dim).astype("float32")
        embedding_matrix[0] = 0.0
        self.train_data_loader = BucketIterator(make_absa_dataset(32, opt.vocab_size, 10, rng), opt.batch_size, shuffle=True)
        self.test_data_loader = BucketIterator(make_absa_dataset(16, opt.vocab_size, 10, rng), opt.batch_size, shuffle=False)
        self.model = opt.model_class(embedding_matrix, opt).to(opt.device)
        self.global_f1 = 0.

    def _reset_params(self):
        for p in self.model.parameters():
            if p.requires_grad:
                if len(p.shape) > 1:
                    self.opt.initializer(p)
                else:
                    stdv = 1. / math.sqrt(p.shape[0])
                    torch.nn.init.uniform_(p, a=-stdv, b=stdv)

    def _train(self, criterion, optimizer):
        max_test_acc, max_test_f1, global_step = 0, 0, 0
        for epoch in range(self.opt.num_epoch):
            n_correct, n_total = 0, 0
            for i_batch, sample_batched in enumerate(self.train_data_loader):
                global_step += 1
                self.model.train()
                optimizer.zero_grad()
                inputs = [sample_batched[col].to(self.opt.device) for col in self.opt.inputs_cols]
                targets = sample_batched["polarity"].to(self.opt.device)
                outputs = self.model(inputs)
                loss = criterion(outputs, targets)
                loss.backward()
                optimizer.step()

                if global_step % self.opt.log_step == 0:
                    n_correct += (torch.argmax(outputs, -1) == targets).sum().item()
                    n_total += len(outputs)
                    test_acc, test_f1 = self._evaluate_acc_f1()
                    max_test_acc, max_test_f1 = max(max_test_acc, test_acc), max(max_test_f1, test_f1)
                    print("loss: {:.4f}, acc: {:.4f}, test_acc: {:.4f}, test_f1: {:.4f}".format(
                        loss.item(), n_correct / n_total, test_acc, test_f1))
        return max_test_acc, max_test_f1

    def _evaluate_acc_f1(self):
        self.model.eval()
        targets_all, outputs_all = [], []
        with torch.no_grad():
            for t_sample_batched in self.test_data_loader:
                t_inputs = [t_sample_batched[col].to(self.opt.device) for col in self.opt.inputs_cols]
                targets_all.append(t_sample_batched["polarity"])
                outputs_all.append(self.model(t_inputs))
        targets_all, outputs_all = torch.cat(targets_all), torch.cat(outputs_all)
        test_acc = (torch.argmax(outputs_all, -1) == targets_all).float().mean().item()
        return test_acc, macro_f1(targets_all.numpy(), torch.argmax(outputs_all, -1).numpy())

    def run(self, repeats=1):
        criterion = nn.CrossEntropyLoss()
        _params = filter(lambda p: p.requires_grad, self.model.parameters())
        optimizer = self.opt.optimizer(_params, lr=self.opt.learning_rate, weight_decay=self.opt.l2reg)
        for i in range(repeats):
            print("repeat: ", (i + 1))
            self._reset_params()
            max_test_acc, max_test_f1 = self._train(criterion, optimizer)
            print("max_test_acc: {:.4f}, max_test_f1: {:.4f}".format(max_test_acc, max_test_f1))


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_name", default="afgcn", type=str)
    parser.add_argument("--dataset", default="rest14", type=str, help="rest14, lap14, rest15, rest16")
    parser.add_argument("--optimizer", default="adam", type=str)
    parser.add_argument("--initializer", default="xavier_uniform_", type=str)
    parser.add_argument("--learning_rate", default=0.001, type=float)
    parser.add_argument("--l2reg", default=0.00001, type=float)
    parser.add_argument("--num_epoch", default=2, type=int)
    parser.add_argument("--batch_size", default=8, type=int)
    parser.add_argument("--log_step", default=2, type=int)
    parser.add_argument("--embed_dim", default=16, type=int)
    parser.add_argument("--hidden_dim", default=16, type=int)
    parser.add_argument("--vocab_size", default=50, type=int)
    parser.add_argument("--polarities_dim", default=3, type=int)
    parser.add_argument("--seed", default=29, type=int)
    opt = parser.parse_args(argv)

    model_classes = {"afgcn": AFGCN, "intergcn": INTERGCN}
    input_colses = {
        "afgcn": ["text_indices", "aspect_indices", "left_indices", "dependency_graph"],
        "intergcn": ["text_indices", "aspect_indices", "left_indices", "dependency_graph", "aspect_graph"],
    }
    initializers = {"xavier_uniform_": torch.nn.init.xavier_uniform_, "orthogonal_": torch.nn.init.orthogonal_}
    optimizers = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad}
    opt.model_class = model_classes[opt.model_name]
    opt.inputs_cols = input_colses[opt.model_name]
    opt.initializer = initializers[opt.initializer]
    opt.optimizer = optimizers[opt.optimizer]
    opt.device = torch.device("cpu")

    random.seed(opt.seed)
    numpy.random.seed(opt.seed)
    torch.manual_seed(opt.seed)
    Instructor(opt).run()


if __name__ == "__main__":
    main(["--model_name", "intergcn", "--dataset", "rest14", "--learning_rate", "1e-3", "--seed", "29", "--batch_size", "8"])
