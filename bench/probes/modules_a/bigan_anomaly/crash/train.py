# expect: inplace_version
# source: https://github.com/mperezcarrasco/PyTorch-BiGAN/issues/1
"""BiGAN (generator, encoder and joint x/z discriminator) trained on synthetic
32x32 RGB "normal" images, the first stage of a BiGAN anomaly detector; the
training loop lives in the TrainerBiGAN class."""
import argparse

import torch

from trainer import TrainerBiGAN


def get_synthetic_loader(args):
    """Stand-in for get_cifar10: smooth random textures in [-1, 1]."""
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(args.num_batches):
        base = torch.rand(args.batch_size, 3, 8, 8, generator=g)
        x = torch.nn.functional.interpolate(base, size=32, mode="bilinear", align_corners=False)
        batches.append((x * 2 - 1, torch.zeros(args.batch_size, dtype=torch.long)))
    return batches


if __name__ == '__main__':
    torch.manual_seed(0)
    parser = argparse.ArgumentParser()
    parser.add_argument("--num_epochs", type=int, default=2, help="number of epochs")
    parser.add_argument('--lr_adam', type=float, default=1e-4, help='learning rate')
    parser.add_argument("--batch_size", type=int, default=8, help="Batch size")
    parser.add_argument("--num_batches", type=int, default=3, help="batches per epoch")
    parser.add_argument('--latent_dim', type=int, default=32,
                        help='Dimension of the latent variable z')
    args = parser.parse_args()

    device = torch.device('cpu')
    data = get_synthetic_loader(args)
    bigan = TrainerBiGAN(args, data, device)
    bigan.train()  # raises
