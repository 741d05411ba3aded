# expect: clean
# source: https://github.com/zalandoresearch/pytorch-vq-vae/issues/5
"""VQ-VAE with an EMA-updated codebook (van den Oord et al. 2017, appendix A.1).

Follows the VectorQuantizerEMA layout of the zalando pytorch-vq-vae notebook,
with the EMA statistics updated *after* quantization and the e-latent loss, as
discussed in the issue tracker.
"""
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class VectorQuantizerEMA(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, commitment_cost, decay, epsilon=1e-5):
        super().__init__()
        self._embedding_dim = embedding_dim
        self._num_embeddings = num_embeddings

        self._embedding = nn.Embedding(self._num_embeddings, self._embedding_dim)
        self._embedding.weight.data.normal_()
        self._commitment_cost = commitment_cost

        self.register_buffer("_ema_cluster_size", torch.zeros(num_embeddings))
        self._ema_w = nn.Parameter(torch.Tensor(num_embeddings, self._embedding_dim))
        self._ema_w.data.normal_()

        self._decay = decay
        self._epsilon = epsilon

    @torch.no_grad()
    def _ema_update(self, encodings, flat_input):
        # N_i <- gamma * N_i + (1 - gamma) * n_i
        self._ema_cluster_size.mul_(self._decay).add_(torch.sum(encodings, 0), alpha=1 - self._decay)

        # Laplace smoothing of the cluster size
        n = torch.sum(self._ema_cluster_size)
        self._ema_cluster_size.copy_(
            (self._ema_cluster_size + self._epsilon) / (n + self._num_embeddings * self._epsilon) * n)

        # m_i <- gamma * m_i + (1 - gamma) * sum_j E(x)_j
        dw = torch.matmul(encodings.t(), flat_input)
        self._ema_w.mul_(self._decay).add_(dw, alpha=1 - self._decay)

        # e_i <- m_i / N_i
        self._embedding.weight.copy_(self._ema_w / self._ema_cluster_size.unsqueeze(1))

    def forward(self, inputs):
        # convert inputs from BCHW -> BHWC
        inputs = inputs.permute(0, 2, 3, 1).contiguous()
        input_shape = inputs.shape
        flat_input = inputs.view(-1, self._embedding_dim)

        # Calculate distances
        distances = (torch.sum(flat_input ** 2, dim=1, keepdim=True)
                     + torch.sum(self._embedding.weight ** 2, dim=1)
                     - 2 * torch.matmul(flat_input, self._embedding.weight.t()))

        # Encoding
        encoding_indices = torch.argmin(distances, dim=1).unsqueeze(1)
        encodings = torch.zeros(encoding_indices.shape[0], self._num_embeddings)
        encodings.scatter_(1, encoding_indices, 1)

        # Quantize and unflatten
        quantized = torch.matmul(encodings, self._embedding.weight).view(input_shape)

        # Loss
        e_latent_loss = F.mse_loss(quantized.detach(), inputs)
        loss = self._commitment_cost * e_latent_loss

        # Use EMA to update the embedding vectors
        if self.training:
            self._ema_update(encodings, flat_input)

        quantized = inputs + (quantized - inputs).detach()
        avg_probs = torch.mean(encodings, dim=0)
        perplexity = torch.exp(-torch.sum(avg_probs * torch.log(avg_probs + 1e-10)))

        # convert quantized from BHWC -> BCHW
        return loss, quantized.permute(0, 3, 1, 2).contiguous(), perplexity, encodings


class Residual(nn.Module):
    def __init__(self, channels, hidden):
        super().__init__()
        self._block = nn.Sequential(
            nn.ReLU(True), nn.Conv2d(channels, hidden, 3, padding=1, bias=False),
            nn.ReLU(True), nn.Conv2d(hidden, channels, 1, bias=False),
        )

    def forward(self, x):
        return x + self._block(x)


class Encoder(nn.Module):
    def __init__(self, in_channels, num_hiddens, num_residual_hiddens):
        super().__init__()
        self._conv_1 = nn.Conv2d(in_channels, num_hiddens // 2, 4, stride=2, padding=1)
        self._conv_2 = nn.Conv2d(num_hiddens // 2, num_hiddens, 4, stride=2, padding=1)
        self._residual = Residual(num_hiddens, num_residual_hiddens)

    def forward(self, x):
        x = F.relu(self._conv_1(x))
        return F.relu(self._residual(self._conv_2(x)))


class Decoder(nn.Module):
    def __init__(self, in_channels, num_hiddens, num_residual_hiddens, out_channels):
        super().__init__()
        self._conv_1 = nn.Conv2d(in_channels, num_hiddens, 3, padding=1)
        self._residual = Residual(num_hiddens, num_residual_hiddens)
        self._conv_trans_1 = nn.ConvTranspose2d(num_hiddens, num_hiddens // 2, 4, stride=2, padding=1)
        self._conv_trans_2 = nn.ConvTranspose2d(num_hiddens // 2, out_channels, 4, stride=2, padding=1)

    def forward(self, x):
        x = F.relu(self._residual(self._conv_1(x)))
        return self._conv_trans_2(F.relu(self._conv_trans_1(x)))


class Model(nn.Module):
    def __init__(self, num_hiddens, num_residual_hiddens, num_embeddings, embedding_dim,
                 commitment_cost, decay):
        super().__init__()
        self._encoder = Encoder(3, num_hiddens, num_residual_hiddens)
        self._pre_vq_conv = nn.Conv2d(num_hiddens, embedding_dim, 1)
        self._vq_vae = VectorQuantizerEMA(num_embeddings, embedding_dim, commitment_cost, decay)
        self._decoder = Decoder(embedding_dim, num_hiddens, num_residual_hiddens, 3)

    def forward(self, x):
        z = self._pre_vq_conv(self._encoder(x))
        loss, quantized, perplexity, _ = self._vq_vae(z)
        return loss, self._decoder(quantized), perplexity


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--num_training_updates", type=int, default=5)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--num_hiddens", type=int, default=32)
    p.add_argument("--num_residual_hiddens", type=int, default=8)
    p.add_argument("--embedding_dim", type=int, default=16)
    p.add_argument("--num_embeddings", type=int, default=32)
    p.add_argument("--commitment_cost", type=float, default=0.25)
    p.add_argument("--decay", type=float, default=0.99)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    return p.parse_args([])


def main():
    args = parse_args()
    torch.manual_seed(42)
    data_variance = 0.06
    model = Model(args.num_hiddens, args.num_residual_hiddens, args.num_embeddings,
                  args.embedding_dim, args.commitment_cost, args.decay)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate, amsgrad=False)
    model.train()
    train_res_recon_error, train_res_perplexity = [], []
    for i in range(args.num_training_updates):
        data = torch.rand(args.batch_size, 3, 16, 16) - 0.5
        optimizer.zero_grad()
        vq_loss, data_recon, perplexity = model(data)
        recon_error = F.mse_loss(data_recon, data) / data_variance
        loss = recon_error + vq_loss
        loss.backward()
        optimizer.step()
        train_res_recon_error.append(recon_error.item())
        train_res_perplexity.append(perplexity.item())
        print("%d iterations | recon_error: %.3f | perplexity: %.3f"
              % (i + 1, np.mean(train_res_recon_error[-100:]), np.mean(train_res_perplexity[-100:])))


if __name__ == "__main__":
    main()
