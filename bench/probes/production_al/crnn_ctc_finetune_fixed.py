# expect: clean
# source: https://github.com/chineseocr/chineseocr/issues/328
"""CRNN text-line recognition fine-tuning with CTC, in the layout of chineseocr's
train/ocr/train-ocr notebook: config constants (LSTMFLAG, alphabet, image size),
the project's CRNN (VGG-style CNN, optional BiLSTM head or a linear head),
weights_init, loading a "pretrained" state dict except the last layer,
strLabelConverter, trainBatch/predict/val helpers, a keras-like Progbar, and a
first stage that freezes the pretrained layers and trains only the new output
layer. Synthetic stripe images with digit strings replace the real OCR data."""
import collections
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

torch.manual_seed(0)
np.random.seed(0)

# ---- config.py
LSTMFLAG = False  # CNN + CTC only
GPU = False
alphabetChinese = "0123456789"
imgH, imgW, nh = 32, 64, 32
batchSize = 8
FINETUNE_LAYER = "rnn.1.embedding" if LSTMFLAG else "linear"


class BidirectionalLSTM(nn.Module):
    def __init__(self, nIn, nHidden, nOut):
        super(BidirectionalLSTM, self).__init__()
        self.rnn = nn.LSTM(nIn, nHidden, bidirectional=True)
        self.embedding = nn.Linear(nHidden * 2, nOut)

    def forward(self, input):
        recurrent, _ = self.rnn(input)
        T, b, h = recurrent.size()
        output = self.embedding(recurrent.view(T * b, h))
        return output.view(T, b, -1)


class CRNN(nn.Module):
    def __init__(self, imgH, nc, nclass, nh, n_rnn=2, leakyRelu=False, lstmFlag=True):
        super(CRNN, self).__init__()
        assert imgH % 16 == 0, "imgH has to be a multiple of 16"
        ks = [3, 3, 3, 3, 3, 3, 2]
        ps = [1, 1, 1, 1, 1, 1, 0]
        ss = [1, 1, 1, 1, 1, 1, 1]
        nm = [8, 16, 32, 32, 64, 64, nh * 2]
        self.lstmFlag = lstmFlag
        cnn = nn.Sequential()

        def convRelu(i, batchNormalization=False):
            nIn = nc if i == 0 else nm[i - 1]
            cnn.add_module("conv{0}".format(i), nn.Conv2d(nIn, nm[i], ks[i], ss[i], ps[i]))
            if batchNormalization:
                cnn.add_module("batchnorm{0}".format(i), nn.BatchNorm2d(nm[i]))
            if leakyRelu:
                cnn.add_module("relu{0}".format(i), nn.LeakyReLU(0.2, inplace=True))
            else:
                cnn.add_module("relu{0}".format(i), nn.ReLU(True))

        convRelu(0)
        cnn.add_module("pooling0", nn.MaxPool2d(2, 2))
        convRelu(1)
        cnn.add_module("pooling1", nn.MaxPool2d(2, 2))
        convRelu(2, True)
        convRelu(3)
        cnn.add_module("pooling2", nn.MaxPool2d((2, 2), (2, 1), (0, 1)))
        convRelu(4, True)
        convRelu(5)
        cnn.add_module("pooling3", nn.MaxPool2d((2, 2), (2, 1), (0, 1)))
        convRelu(6, True)
        self.cnn = cnn
        if self.lstmFlag:
            self.rnn = nn.Sequential(BidirectionalLSTM(nh * 2, nh, nh), BidirectionalLSTM(nh, nh, nclass))
        else:
            self.linear = nn.Linear(nh * 2, nclass)

    def forward(self, input):
        conv = self.cnn(input)
        b, c, h, w = conv.size()
        assert h == 1, "the height of conv must be 1"
        conv = conv.squeeze(2).permute(2, 0, 1)  # [w, b, c]
        if self.lstmFlag:
            output = self.rnn(conv)
        else:
            T, b, h = conv.size()
            output = self.linear(conv.contiguous().view(T * b, h)).view(T, b, -1)
        return output


class strLabelConverter(object):
    def __init__(self, alphabet):
        self.alphabet = alphabet + "-"
        self.dict = {char: i + 1 for i, char in enumerate(alphabet)}

    def encode(self, text):
        length = [len(s) for s in text]
        text = [self.dict[char] for s in text for char in s]
        return torch.IntTensor(text), torch.IntTensor(length)

    def decode(self, t, length, raw=False):
        t = t.tolist()
        if raw:
            return "".join([self.alphabet[i - 1] for i in t])
        char_list = [self.alphabet[t[i] - 1] for i in range(length) if t[i] != 0 and not (i > 0 and t[i - 1] == t[i])]
        return "".join(char_list)


class PathDataset:
    """Stripe images whose column pattern encodes a 3-digit string."""

    def __init__(self, n, seed):
        rng = np.random.RandomState(seed)
        self.labels = ["".join(str(d) for d in rng.randint(0, 10, 3)) for _ in range(n)]
        self.images = []
        for s in self.labels:
            im = rng.rand(1, imgH, imgW).astype(np.float32) * 0.2
            for k, ch in enumerate(s):
                x0 = 6 + k * 18
                im[0, 4 + int(ch) * 2: 10 + int(ch) * 2, x0:x0 + 10] += 1.0
            self.images.append(torch.from_numpy(im))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


def batches(dataset, bs, rng):
    order = rng.permutation(len(dataset))
    for k in range(0, len(order) - bs + 1, bs):
        idx = order[k:k + bs]
        yield torch.stack([dataset[i][0] for i in idx]), [dataset[i][1] for i in idx]


class Progbar(object):
    def __init__(self, target):
        self.target, self.sums = target, collections.OrderedDict()

    def update(self, current, values=()):
        info = " - ".join("%s: %.4f" % (k, v) for k, v in values)
        sys.stdout.write("%d/%d - %s\n" % (current, self.target, info))


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        m.weight.data.normal_(0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        m.weight.data.normal_(1.0, 0.02)
        m.bias.data.fill_(0)


def loadData(v, data):
    with torch.no_grad():
        v.resize_(data.size()).copy_(data)


model = CRNN(32, 1, len(alphabetChinese) + 1, nh, 1, lstmFlag=LSTMFLAG)
model.apply(weights_init)
preWeightDict = {k: v.clone() for k, v in CRNN(32, 1, 40, nh, 1, lstmFlag=LSTMFLAG).state_dict().items()}
modelWeightDict = model.state_dict()
for k, v in preWeightDict.items():
    name = k.replace("module.", "")
    if FINETUNE_LAYER not in name and modelWeightDict[name].shape == v.shape:  # do not load the last layer
        modelWeightDict[name] = v
model.load_state_dict(modelWeightDict)

lr = 0.1
optimizer = optim.Adadelta(model.parameters(), lr=lr)
converter = strLabelConverter("".join(alphabetChinese))
criterion = nn.CTCLoss(reduction="sum", zero_infinity=True)
image = torch.FloatTensor(batchSize, 1, imgH, imgH)
text = torch.IntTensor(batchSize * 5)
length = torch.IntTensor(batchSize)


def trainBatch(net, criterion, optimizer, cpu_images, cpu_texts):
    batch_size = cpu_images.size(0)
    loadData(image, cpu_images)
    t, l = converter.encode(cpu_texts)
    loadData(text, t)
    loadData(length, l)
    preds = net(image).log_softmax(2)
    preds_size = torch.IntTensor([preds.size(0)] * batch_size)
    cost = criterion(preds, text, preds_size, length) / batch_size
    net.zero_grad()
    cost.backward()
    optimizer.step()
    return cost


def predict(im):
    preds = model(im.view(1, *im.size()))
    _, preds = preds.max(2)
    preds = preds.transpose(1, 0).contiguous().view(-1)
    return converter.decode(preds.data, preds.size(0), raw=False)


def val(net, dataset, max_iter=100):
    for p in net.parameters():
        p.requires_grad = False
    net.eval()
    n_correct = 0
    N = len(dataset)
    max_iter = min(max_iter, N)
    rng = np.random.RandomState(1)
    for i in range(max_iter):
        im, label = dataset[rng.randint(0, N)]
        if predict(im).strip() == label:
            n_correct += 1
    return n_correct / float(max_iter)


def main():
    traindataset, testdataset = PathDataset(48, 0), PathDataset(16, 1)
    nepochs, acc = 2, 0
    n = len(traindataset) // batchSize
    interval = n // 2
    rng = np.random.RandomState(0)
    # stage 1: freeze the pretrained layers, train the new output layer
    for i in range(nepochs):
        print("epoch:{}/{}".format(i, nepochs))
        pbar = Progbar(target=n)
        loss = 0
        for j, (cpu_images, cpu_texts) in enumerate(batches(traindataset, batchSize, rng)):
            for p in model.named_parameters():
                p[1].requires_grad = True
                if FINETUNE_LAYER in p[0]:
                    p[1].requires_grad = True
                else:
                    p[1].requires_grad = False
            model.train()
            cost = trainBatch(model, criterion, optimizer, cpu_images, cpu_texts)
            loss += cost.data.numpy()
            if (j + 1) % interval == 0:
                curAcc = val(model, testdataset, max_iter=16)
                acc = max(acc, curAcc)
            pbar.update(j + 1, values=[("loss", loss / ((j + 1) * batchSize)), ("acc", acc)])


if __name__ == "__main__":
    main()
