# expect: clean
# source: https://github.com/fourson/DeblurGAN-pytorch/issues/6
"""DeblurGAN training (pytorch-template layout, shrunk for CPU).
A ResNet generator maps blurred images to sharp ones; a PatchGAN discriminator scores sharp vs.
deblurred images.  The adversarial loss ('gan_loss' or 'wgan_gp_loss') is chosen by the nested
config, the content loss is a perceptual loss on a frozen conv feature extractor.  BaseTrainer
drives epochs, Trainer implements `_train_epoch` / `_valid_epoch`; metrics go to an in-memory
writer.  Data are synthetic: random sharp images blurred with a box filter."""
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.autograd as autograd

CONFIG = {
    'generator': {'type': 'ResNetGenerator', 'args': {'ngf': 8, 'n_blocks': 2}},
    'discriminator': {'type': 'NLayerDiscriminator', 'args': {'ndf': 8, 'n_layers': 3, 'use_sigmoid': True}},
    'data_loader': {'args': {'batch_size': 2, 'n_samples': 6, 'image_size': 32}},
    'optimizer': {'generator': {'lr': 1e-4, 'betas': (0.5, 0.999)},
                  'discriminator': {'lr': 1e-4, 'betas': (0.5, 0.999)}},
    'loss': {'adversarial': 'gan_loss', 'content': 'perceptual_loss'},
    'metrics': ['PSNR'],
    'lr_scheduler': {'generator': {'step_size': 2, 'gamma': 0.5}, 'discriminator': {'step_size': 2, 'gamma': 0.5}},
    'trainer': {'epochs': 2, 'verbosity': 2},
    'others': {'gp_lambda': 10, 'content_loss_lambda': 100},
}

# utils/util.py
def denormalize(tensor):
    return (tensor + 1) / 2

class DummyWriter:
    def __init__(self):
        self.step, self.mode, self.scalars = 0, 'train', {}

    def set_step(self, step, mode='train'):
        self.step, self.mode = step, mode

    def add_scalar(self, tag, value):
        self.scalars.setdefault('{}/{}'.format(self.mode, tag), []).append((self.step, float(value)))

# model/layer_utils.py + model/model.py
class ResBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.block = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, 3), nn.InstanceNorm2d(dim), nn.ReLU(True),
                                   nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, 3), nn.InstanceNorm2d(dim))

    def forward(self, x):
        return x + self.block(x)

class ResNetGenerator(nn.Module):
    def __init__(self, ngf=64, n_blocks=9):
        super().__init__()
        layers = [nn.ReflectionPad2d(3), nn.Conv2d(3, ngf, 7), nn.InstanceNorm2d(ngf), nn.ReLU(True),
                  nn.Conv2d(ngf, ngf * 2, 3, 2, 1), nn.InstanceNorm2d(ngf * 2), nn.ReLU(True)]
        layers += [ResBlock(ngf * 2) for _ in range(n_blocks)]
        layers += [nn.ConvTranspose2d(ngf * 2, ngf, 3, 2, 1, output_padding=1), nn.InstanceNorm2d(ngf), nn.ReLU(True),
                   nn.ReflectionPad2d(3), nn.Conv2d(ngf, 3, 7), nn.Tanh()]
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        # global skip connection, as in DeblurGAN
        return torch.clamp(x + self.model(x), -1, 1)

class NLayerDiscriminator(nn.Module):
    def __init__(self, ndf=64, n_layers=3, use_sigmoid=False):
        super().__init__()
        seq = [nn.Conv2d(3, ndf, 4, 2, 1), nn.LeakyReLU(0.2, True)]
        nf = ndf
        for n in range(1, n_layers):
            seq += [nn.Conv2d(nf, nf * 2, 4, 2, 1), nn.InstanceNorm2d(nf * 2), nn.LeakyReLU(0.2, True)]
            nf *= 2
        seq += [nn.Conv2d(nf, nf * 2, 4, 1, 1), nn.InstanceNorm2d(nf * 2), nn.LeakyReLU(0.2, True),
                nn.Conv2d(nf * 2, 1, 4, 1, 1)]
        if use_sigmoid:
            seq += [nn.Sigmoid()]
        self.model = nn.Sequential(*seq)

    def forward(self, x):
        return self.model(x)

def _conv3_3_feature_extractor():
    torch.manual_seed(1234)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, 1, 1), nn.ReLU())
    for p in net.parameters():
        p.requires_grad = False
    return net.eval()

CONV3_3_IN_VGG_19 = _conv3_3_feature_extractor()

# model/loss.py
def perceptual_loss(deblurred, sharp):
    model = CONV3_3_IN_VGG_19
    deblurred_feature_map = model.forward(deblurred)
    sharp_feature_map = model.forward(sharp).detach()  # we do not need the gradient of it
    return F.mse_loss(deblurred_feature_map, sharp_feature_map)

def wgan_gp_loss(type, **kwargs):
    if type == 'G':
        return -kwargs['deblurred_discriminator_out'].mean()
    elif type == 'D':
        interpolates = kwargs['interpolates']
        interpolates_discriminator_out = kwargs['interpolates_discriminator_out']
        wgan_loss = kwargs['deblurred_discriminator_out'].mean() - kwargs['sharp_discriminator_out'].mean()
        gradients = autograd.grad(outputs=interpolates_discriminator_out, inputs=interpolates,
                                  grad_outputs=torch.ones(interpolates_discriminator_out.size()),
                                  retain_graph=True, create_graph=True)[0]
        gradient_penalty = ((gradients.view(gradients.size(0), -1).norm(2, dim=1) - 1) ** 2).mean()
        return wgan_loss, kwargs['gp_lambda'] * gradient_penalty

def gan_loss(type, **kwargs):
    if type == 'G':
        out = kwargs['deblurred_discriminator_out']
        return F.binary_cross_entropy(out, torch.ones_like(out))
    elif type == 'D':
        sharp_out, deblurred_out = kwargs['sharp_discriminator_out'], kwargs['deblurred_discriminator_out']
        real_loss = F.binary_cross_entropy(sharp_out, torch.ones_like(sharp_out))
        fake_loss = F.binary_cross_entropy(deblurred_out, torch.zeros_like(deblurred_out))
        return (real_loss + fake_loss) / 2.0

# model/metric.py
def PSNR(deblurred, sharp):
    mse = F.mse_loss(denormalize(deblurred), denormalize(sharp)).item()
    return 10 * np.log10(1.0 / max(mse, 1e-10))

# data_loader
class BlurDataLoader:
    def __init__(self, batch_size, n_samples, image_size, seed):
        g = torch.Generator().manual_seed(seed)
        self.batch_size, self.n_samples = batch_size, n_samples
        self.sharp = torch.rand(n_samples, 3, image_size, image_size, generator=g) * 2 - 1
        kernel = torch.ones(3, 1, 5, 5) / 25.0
        self.blurred = F.conv2d(F.pad(self.sharp, (2, 2, 2, 2), mode='reflect'), kernel, groups=3)

    def __len__(self):
        return (self.n_samples + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        for i in range(0, self.n_samples, self.batch_size):
            yield {'blurred': self.blurred[i:i + self.batch_size], 'sharp': self.sharp[i:i + self.batch_size]}

# base/base_trainer.py
class BaseTrainer:
    def __init__(self, config, generator, discriminator, loss, metrics, optimizer, lr_scheduler):
        self.config = config
        self.device = torch.device('cpu')
        self.generator, self.discriminator = generator.to(self.device), discriminator.to(self.device)
        self.adversarial_loss, self.content_loss = loss['adversarial'], loss['content']
        self.metrics = metrics
        self.generator_optimizer, self.discriminator_optimizer = optimizer['generator'], optimizer['discriminator']
        self.generator_lr_scheduler = lr_scheduler['generator']
        self.discriminator_lr_scheduler = lr_scheduler['discriminator']
        self.epochs = config['trainer']['epochs']
        self.verbosity = config['trainer']['verbosity']
        self.writer = DummyWriter()

    def train(self):
        for epoch in range(1, self.epochs + 1):
            result = self._train_epoch(epoch)
            print('epoch {}: {}'.format(epoch, {k: (round(v, 4) if isinstance(v, float) else v)
                                                 for k, v in result.items()}))

# trainer/trainer.py
class Trainer(BaseTrainer):
    def __init__(self, config, generator, discriminator, loss, metrics, optimizer, lr_scheduler, data_loader,
                 valid_data_loader=None):
        super(Trainer, self).__init__(config, generator, discriminator, loss, metrics, optimizer, lr_scheduler)
        self.data_loader = data_loader
        self.valid_data_loader = valid_data_loader
        self.do_validation = self.valid_data_loader is not None
        self.log_step = int(np.sqrt(data_loader.batch_size))

    def _eval_metrics(self, output, target):
        acc_metrics = np.zeros(len(self.metrics))
        for i, metric in enumerate(self.metrics):
            acc_metrics[i] += metric(output, target)
            self.writer.add_scalar('{}'.format(metric.__name__), acc_metrics[i])
        return acc_metrics

    def _train_epoch(self, epoch):
        self.generator.train()
        self.discriminator.train()
        total_generator_loss, total_discriminator_loss = 0, 0
        total_metrics = np.zeros(len(self.metrics))

        for batch_idx, sample in enumerate(self.data_loader):
            self.writer.set_step((epoch - 1) * len(self.data_loader) + batch_idx)
            blurred = sample['blurred'].to(self.device)
            sharp = sample['sharp'].to(self.device)

            # get G's output
            deblurred = self.generator(blurred)

            # get D's output
            sharp_discriminator_out = self.discriminator(sharp)
            deblurred_discriminator_out = self.discriminator(deblurred)

            # set critic_updates
            critic_updates = 5 if self.config['loss']['adversarial'] == 'wgan_gp_loss' else 1

            # train discriminator
            discriminator_loss = 0
            for i in range(critic_updates):
                self.discriminator_optimizer.zero_grad()
                if self.config['loss']['adversarial'] == 'wgan_gp_loss':
                    alpha = random.random()
                    interpolates = alpha * sharp + (1 - alpha) * deblurred
                    kwargs = {'gp_lambda': self.config['others']['gp_lambda'], 'interpolates': interpolates,
                              'interpolates_discriminator_out': self.discriminator(interpolates),
                              'sharp_discriminator_out': sharp_discriminator_out,
                              'deblurred_discriminator_out': deblurred_discriminator_out}
                    wgan_loss_d, gp_d = self.adversarial_loss('D', **kwargs)
                    discriminator_loss_per_update = wgan_loss_d + gp_d
                else:
                    kwargs = {'sharp_discriminator_out': sharp_discriminator_out,
                              'deblurred_discriminator_out': deblurred_discriminator_out}
                    discriminator_loss_per_update = self.adversarial_loss('D', **kwargs)
                discriminator_loss_per_update.backward(retain_graph=True)
                self.discriminator_optimizer.step()
                discriminator_loss += discriminator_loss_per_update.item()

            discriminator_loss /= critic_updates
            self.writer.add_scalar('discriminator_loss', discriminator_loss)
            total_discriminator_loss += discriminator_loss

            # train generator
            self.generator_optimizer.zero_grad()
            content_loss_lambda = self.config['others']['content_loss_lambda']
            kwargs = {'deblurred_discriminator_out': self.discriminator(deblurred)}
            adversarial_loss_g = self.adversarial_loss('G', **kwargs)
            content_loss_g = self.content_loss(deblurred, sharp) * content_loss_lambda
            generator_loss = adversarial_loss_g + content_loss_g
            self.writer.add_scalar('generator_loss', generator_loss.item())

            generator_loss.backward()
            self.generator_optimizer.step()
            total_generator_loss += generator_loss.item()
            total_metrics += self._eval_metrics(deblurred.detach(), sharp)

            if self.verbosity >= 2 and batch_idx % self.log_step == 0:
                print('Train Epoch: {} [{}/{}] generator_loss: {:.6f} discriminator_loss: {:.6f}'.format(
                    epoch, batch_idx * self.data_loader.batch_size, self.data_loader.n_samples,
                    generator_loss.item(), discriminator_loss))

        log = {'generator_loss': total_generator_loss / len(self.data_loader),
               'discriminator_loss': total_discriminator_loss / len(self.data_loader),
               'metrics': (total_metrics / len(self.data_loader)).tolist()}
        if self.do_validation:
            log = {**log, **self._valid_epoch(epoch)}
        self.generator_lr_scheduler.step()
        self.discriminator_lr_scheduler.step()
        return log

    def _valid_epoch(self, epoch):
        self.generator.eval()
        self.discriminator.eval()
        total_val_loss, total_val_metrics = 0, np.zeros(len(self.metrics))
        with torch.no_grad():
            for batch_idx, sample in enumerate(self.valid_data_loader):
                blurred, sharp = sample['blurred'].to(self.device), sample['sharp'].to(self.device)
                deblurred = self.generator(blurred)
                kwargs = {'deblurred_discriminator_out': self.discriminator(deblurred)}
                loss_g = self.adversarial_loss('G', **kwargs) + \
                    self.content_loss(deblurred, sharp) * self.config['others']['content_loss_lambda']
                self.writer.set_step((epoch - 1) * len(self.valid_data_loader) + batch_idx, 'valid')
                total_val_loss += loss_g.item()
                total_val_metrics += self._eval_metrics(deblurred, sharp)
        return {'val_loss': total_val_loss / len(self.valid_data_loader),
                'val_metrics': (total_val_metrics / len(self.valid_data_loader)).tolist()}

def main(config):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    random.seed(0)
    np.random.seed(0)
    dl_args = config['data_loader']['args']
    data_loader = BlurDataLoader(dl_args['batch_size'], dl_args['n_samples'], dl_args['image_size'], seed=0)
    valid_data_loader = BlurDataLoader(dl_args['batch_size'], 2, dl_args['image_size'], seed=1)
    generator = globals()[config['generator']['type']](**config['generator']['args'])
    discriminator = globals()[config['discriminator']['type']](**config['discriminator']['args'])
    loss = {'adversarial': globals()[config['loss']['adversarial']], 'content': globals()[config['loss']['content']]}
    metrics = [globals()[met] for met in config['metrics']]
    optimizer = {
        'generator': torch.optim.Adam(generator.parameters(), **config['optimizer']['generator']),
        'discriminator': torch.optim.Adam(discriminator.parameters(), **config['optimizer']['discriminator'])}
    lr_scheduler = {k: torch.optim.lr_scheduler.StepLR(optimizer[k], **config['lr_scheduler'][k])
                    for k in ('generator', 'discriminator')}
    trainer = Trainer(config, generator, discriminator, loss, metrics, optimizer, lr_scheduler,
                      data_loader, valid_data_loader)
    trainer.train()

if __name__ == '__main__':
    main(CONFIG)
