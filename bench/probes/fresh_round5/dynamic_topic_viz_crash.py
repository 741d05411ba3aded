# expect: numpy_requires_grad
# source: https://github.com/adjidieng/DETM/pull/11
"""Dynamic Embedded Topic Model (DETM) -- small synthetic-corpus run.

Trains the model for a few epochs, then visualizes topics over time and the
nearest neighbours of a few query words in the learned embedding space.
"""
import argparse
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim

parser = argparse.ArgumentParser(description='The Embedded Topic Model')
parser.add_argument('--num_topics', type=int, default=5)
parser.add_argument('--num_times', type=int, default=4)
parser.add_argument('--vocab_size', type=int, default=60)
parser.add_argument('--rho_size', type=int, default=16)
parser.add_argument('--t_hidden_size', type=int, default=32)
parser.add_argument('--eta_hidden_size', type=int, default=16)
parser.add_argument('--delta', type=float, default=0.005)
parser.add_argument('--batch_size', type=int, default=20)
parser.add_argument('--epochs', type=int, default=3)
parser.add_argument('--lr', type=float, default=5e-3)
parser.add_argument('--wdecay', type=float, default=1.2e-6)
parser.add_argument('--bow_norm', type=int, default=1)
parser.add_argument('--num_words', type=int, default=5)
parser.add_argument('--visualize_every', type=int, default=1)
parser.add_argument('--seed', type=int, default=2019)
args = parser.parse_args([])

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
np.random.seed(args.seed)
torch.manual_seed(args.seed)

## synthetic corpus
vocab = ['w{}'.format(i) for i in range(args.vocab_size - 5)] + \
    ['economic', 'assembly', 'security', 'debt', 'rights']
num_docs_train = 80
train_times = torch.randint(0, args.num_times, (num_docs_train,))
true_topics = torch.softmax(torch.randn(args.num_topics, args.vocab_size) * 2, dim=-1)
doc_mix = torch.distributions.Dirichlet(torch.ones(args.num_topics) * 0.3).sample((num_docs_train,))
train_bows = torch.distributions.Multinomial(50, probs=doc_mix @ true_topics).sample()


def get_rnn_input(bows, times, num_times, vocab_size):
    rnn_input = torch.zeros(num_times, vocab_size)
    cnt = torch.zeros(num_times)
    for t in range(num_times):
        rnn_input[t] = bows[times == t].sum(0)
        cnt[t] = (times == t).sum()
    return rnn_input / cnt.clamp(min=1).unsqueeze(1)


train_rnn_inp = get_rnn_input(train_bows, train_times, args.num_times, args.vocab_size)


class DETM(nn.Module):
    def __init__(self, args):
        super(DETM, self).__init__()
        self.num_topics = args.num_topics
        self.num_times = args.num_times
        self.rho_size = args.rho_size
        self.delta = args.delta
        ## define the word embedding matrix \rho
        self.rho = nn.Linear(args.rho_size, args.vocab_size, bias=False)
        ## variational distribution over alpha (topic embeddings through time)
        self.mu_q_alpha = nn.Parameter(torch.randn(args.num_topics, args.num_times, args.rho_size))
        self.logsigma_q_alpha = nn.Parameter(torch.randn(args.num_topics, args.num_times, args.rho_size))
        ## q(theta)
        self.q_theta = nn.Sequential(
            nn.Linear(args.vocab_size + args.num_topics, args.t_hidden_size), nn.ReLU(),
            nn.Linear(args.t_hidden_size, args.t_hidden_size), nn.ReLU())
        self.mu_q_theta = nn.Linear(args.t_hidden_size, args.num_topics)
        self.logsigma_q_theta = nn.Linear(args.t_hidden_size, args.num_topics)
        ## q(eta)
        self.q_eta_map = nn.Linear(args.vocab_size, args.eta_hidden_size)
        self.q_eta = nn.LSTM(args.eta_hidden_size, args.eta_hidden_size)
        self.mu_q_eta = nn.Linear(args.eta_hidden_size + args.num_topics, args.num_topics)

    def reparameterize(self, mu, logvar):
        if self.training:
            return mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return mu

    def get_kl(self, q_mu, q_logsigma, p_mu=None, p_logsigma=None):
        if p_mu is None:
            return -0.5 * torch.sum(1 + q_logsigma - q_mu.pow(2) - q_logsigma.exp(), dim=-1)
        sigma_q_sq, sigma_p_sq = q_logsigma.exp(), p_logsigma.exp()
        kl = (sigma_q_sq + (q_mu - p_mu) ** 2) / (sigma_p_sq + 1e-6) - 1 + p_logsigma - q_logsigma
        return 0.5 * kl.sum(-1)

    def get_alpha(self):
        alphas = self.reparameterize(self.mu_q_alpha, self.logsigma_q_alpha)
        kl = self.get_kl(self.mu_q_alpha[:, 0], self.logsigma_q_alpha[:, 0]).sum()
        p_logsigma = torch.log(self.delta * torch.ones(self.num_topics, self.rho_size))
        for t in range(1, self.num_times):
            kl = kl + self.get_kl(self.mu_q_alpha[:, t], self.logsigma_q_alpha[:, t],
                                  alphas[:, t - 1], p_logsigma).sum()
        return alphas, kl

    def get_eta(self, rnn_inp):
        inp = self.q_eta_map(rnn_inp).unsqueeze(1)
        output, _ = self.q_eta(inp)
        output = output.squeeze(1)
        etas = []
        prev = torch.zeros(self.num_topics)
        for t in range(self.num_times):
            prev = self.mu_q_eta(torch.cat([output[t], prev], dim=0))
            etas.append(prev)
        return torch.stack(etas)

    def get_theta(self, eta, bows):
        q_theta = self.q_theta(torch.cat([bows, eta], dim=1))
        mu, logsigma = self.mu_q_theta(q_theta), self.logsigma_q_theta(q_theta)
        z = self.reparameterize(mu, logsigma)
        return F.softmax(z, dim=-1), self.get_kl(mu - eta, logsigma).mean()

    def get_beta(self, alpha):
        logit = self.rho(alpha.reshape(-1, self.rho_size))
        return F.softmax(logit.view(alpha.size(0), alpha.size(1), -1), dim=-1)

    def forward(self, bows, normalized_bows, times, rnn_inp, num_docs):
        bsz = bows.size(0)
        alpha, kl_alpha = self.get_alpha()
        eta = self.get_eta(rnn_inp)
        theta, kl_theta = self.get_theta(eta[times], normalized_bows)
        beta = self.get_beta(alpha)[:, times].permute(1, 0, 2)
        loglik = torch.log((theta.unsqueeze(2) * beta).sum(1) + 1e-6)
        nll = -(loglik * bows).sum(-1).mean()
        nelbo = nll + kl_theta + kl_alpha * bsz / num_docs
        return nelbo, nll, kl_alpha, kl_theta


## utils
def nearest_neighbors(word, embeddings, vocab, num_words):
    vectors = embeddings.cpu().numpy()  # raises
    index = vocab.index(word)
    query = vectors[index]
    ranks = vectors.dot(query).squeeze()
    denom = np.sqrt(query.T.dot(query) * np.sum(vectors ** 2, 1))
    ranks = ranks / denom
    most_similar = [idx for idx in ranks.argsort()[::-1]]
    return [vocab[comp] for comp in most_similar[:num_words]]


model = DETM(args).to(device)
optimizer = optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.wdecay)


def train(epoch):
    model.train()
    acc_loss, cnt = 0.0, 0
    indices = torch.split(torch.randperm(num_docs_train), args.batch_size)
    for idx, ind in enumerate(indices):
        optimizer.zero_grad()
        data_batch, times_batch = train_bows[ind], train_times[ind]
        sums = data_batch.sum(1).unsqueeze(1)
        normalized_data_batch = data_batch / sums if args.bow_norm else data_batch
        loss, nll, kl_alpha, kl_theta = model(data_batch, normalized_data_batch, times_batch,
                                              train_rnn_inp, num_docs_train)
        loss.backward()
        optimizer.step()
        acc_loss += loss.item()
        cnt += 1
    print('Epoch----->{} .. NELBO: {:.2f}'.format(epoch, acc_loss / cnt))


def visualize():
    """Visualizes topics and embeddings."""
    model.eval()
    with torch.no_grad():
        alpha = model.mu_q_alpha
        beta = model.get_beta(alpha)
        times = [0, args.num_times - 1]
        for k in range(args.num_topics):
            for t in times:
                gamma = beta[k, t, :]
                top_words = list(gamma.cpu().numpy().argsort()[-args.num_words + 1:][::-1])
                print('Topic {} .. Time: {} ===> {}'.format(k, t, [vocab[a] for a in top_words]))
    print('Visualize word embeddings ...')
    queries = ['economic', 'assembly', 'security', 'debt', 'rights']
    try:
        embeddings = model.rho.weight  # Vocab_size x L
    except AttributeError:
        embeddings = model.rho         # Vocab_size x L
    for word in queries:
        print('word: {} .. neighbors: {}'.format(
            word, nearest_neighbors(word, embeddings, vocab, args.num_words)))


for epoch in range(1, args.epochs + 1):
    train(epoch)
    if epoch % args.visualize_every == 0:
        visualize()
print('done, perplexity proxy: {:.2f}'.format(math.exp(min(10.0, model(
    train_bows, train_bows / train_bows.sum(1, keepdim=True), train_times,
    train_rnn_inp, num_docs_train)[1].item() / 50))))
