# expect: clean
# source: https://github.com/ypxie/HDGan/issues/15
"""HDGAN-style text-to-image GAN training worker (birds config, shrunk for CPU).
A hierarchically-nested generator produces images at three resolutions from a sentence
embedding plus noise; a multi-scale discriminator scores each resolution with a pair head and
a local image head.  Losses go to scalar plotters; sample grids are built every epoch."""
import argparse
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.autograd import Variable

# proj_utils/torch_utils.py
def set_lr(optimizer, lr):
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr
    return optimizer

def to_device(src, var=True, requires_grad=False):
    if type(src) is np.ndarray:
        src = torch.from_numpy(src.astype(np.float32))
    return Variable(src, requires_grad=requires_grad) if var else src

def to_numpy(src):
    if type(src) == np.ndarray:
        return src
    elif type(src) == Variable:
        x = src.data
    else:
        x = src
    return x.detach().cpu().numpy()

# proj_utils/plot_utils.py
class plot_scalar(object):
    def __init__(self, name='default', env='main', rate=1):
        self.name, self.env, self.rate = name, env, rate
        self.values, self.steps, self.history = [], [], []
        self.count = 0

    def plot(self, values, step=None):
        org_type_chk = type(values) is list
        values = values if org_type_chk else [values]
        step = step if step is not None else list(range(self.count, self.count + len(values)))
        self.count += len(values)
        self.steps.extend(step)
        self.values.extend(values)
        if self.count % self.rate == 0 or org_type_chk:
            self.flush()

    def flush(self):
        values = np.array(self.values, dtype=np.float64)
        assert not np.isnan(values).any(), 'nan error in loss!!!'
        self.history.append(float(values.mean()))
        self.values, self.steps = [], []

def save_images_list(X_list):
    # X_list: list of B*C*H*W arrays -> one (B*H) x (len*W) grid, no file written here
    rows = [np.concatenate([x.transpose(1, 2, 0) for x in x_tuple], axis=1) for x_tuple in zip(*X_list)]
    return np.concatenate(rows, axis=0)

# fuel/datasets.py  (synthetic stand-in for the birds pickles)
class Dataset(object):
    def __init__(self, num_examples, emb_dim, sizes, seed):
        self.rng = np.random.RandomState(seed)
        self._num_examples, self.sizes = num_examples, sizes
        self.embeddings = self.rng.randn(num_examples, emb_dim).astype(np.float32)
        self.images = self.rng.rand(num_examples, 3, sizes[-1], sizes[-1]).astype(np.float32) * 2 - 1

    def _resize(self, imgs):
        t = torch.from_numpy(imgs)
        return {'output_%d' % s: F.interpolate(t, size=(s, s), mode='bilinear', align_corners=False).numpy()
                for s in self.sizes}

    def next_batch(self, batch_size, num_emb=1):
        idx = self.rng.choice(self._num_examples, batch_size, replace=False)
        widx = self.rng.choice(self._num_examples, batch_size, replace=False)
        emb = self.embeddings[idx]
        return self._resize(self.images[idx]), self._resize(self.images[widx]), emb, idx, None

class DataBundle(object):
    def __init__(self, args):
        self.train = Dataset(16, args.emb_dim, args.sizes, seed=1)
        self.test = Dataset(8, args.emb_dim, args.sizes, seed=2)

# models/hd_networks.py
class condEmbedding(nn.Module):
    def __init__(self, noise_dim, emb_dim):
        super().__init__()
        self.noise_dim = noise_dim
        self.linear = nn.Linear(emb_dim, noise_dim * 2)

    def forward(self, inputs, kl_loss=True):
        out = F.leaky_relu(self.linear(inputs), 0.2)
        mean, log_sigma = out[:, :self.noise_dim], out[:, self.noise_dim:]
        c = mean + torch.exp(log_sigma) * torch.randn_like(log_sigma)
        kl = -log_sigma + 0.5 * (-1 + torch.exp(2. * log_sigma) + mean.pow(2))
        return c, kl.mean()

def up_block(in_dim, out_dim):
    return nn.Sequential(nn.Upsample(scale_factor=2, mode='nearest'),
                         nn.Conv2d(in_dim, out_dim, 3, padding=1), nn.BatchNorm2d(out_dim), nn.ReLU(True))

class Generator(nn.Module):
    def __init__(self, sent_dim, noise_dim, emb_dim, hid_dim, sizes):
        super().__init__()
        self.condEmbedding = condEmbedding(noise_dim, sent_dim)
        self.hid_dim = hid_dim
        self.vec_to_tensor = nn.Linear(noise_dim * 2, hid_dim * 4 * 4)
        self.sizes = sizes
        n_up = int(np.log2(sizes[0] // 4))
        self.scale_first = nn.Sequential(*[up_block(hid_dim, hid_dim) for _ in range(n_up)])
        self.scale_rest = nn.ModuleList([up_block(hid_dim, hid_dim) for _ in sizes[1:]])
        self.to_img = nn.ModuleList([nn.Conv2d(hid_dim, 3, 3, padding=1) for _ in sizes])

    def forward(self, sent_embeddings, z):
        sent_random, kl_loss = self.condEmbedding(sent_embeddings)
        text = torch.cat([sent_random, z], dim=1)
        x = self.vec_to_tensor(text).view(-1, self.hid_dim, 4, 4)
        x = self.scale_first(x)
        out = {}
        out['output_%d' % self.sizes[0]] = torch.tanh(self.to_img[0](x))
        for i, blk in enumerate(self.scale_rest):
            x = blk(x)
            out['output_%d' % self.sizes[i + 1]] = torch.tanh(self.to_img[i + 1](x))
        return out, kl_loss

def ImageDown(in_size, hid_dim):
    layers, ch, s = [], 3, in_size
    while s > 4:
        layers += [nn.Conv2d(ch, hid_dim, 4, 2, 1), nn.LeakyReLU(0.2)]
        ch, s = hid_dim, s // 2
    return nn.Sequential(*layers)

class Discriminator(nn.Module):
    def __init__(self, sizes, sent_dim, hid_dim):
        super().__init__()
        self.down = nn.ModuleDict({str(s): ImageDown(s, hid_dim) for s in sizes})
        self.local = nn.ModuleDict({str(s): nn.Conv2d(hid_dim, 1, 1) for s in sizes})
        self.pair = nn.ModuleDict({str(s): nn.Conv2d(hid_dim + sent_dim, 1, 4) for s in sizes})

    def forward(self, images, embedding):
        key = str(images.size(-1))
        feat = self.down[key](images)
        local_img_disc = self.local[key](feat)
        emb = embedding.view(embedding.size(0), -1, 1, 1).expand(-1, -1, 4, 4)
        pair_disc = self.pair[key](torch.cat([feat, emb], 1)).view(-1, 1)
        return {'pair_disc': pair_disc, 'local_img_disc': local_img_disc}

# HDGan.py
def compute_d_pair_loss(real_logit, wrong_logit, fake_logit):
    real_d_loss = torch.mean(((real_logit) - 1) ** 2)
    wrong_d_loss, fake_d_loss = torch.mean(((wrong_logit)) ** 2), torch.mean(((fake_logit)) ** 2)
    return real_d_loss + (wrong_d_loss + fake_d_loss) / 2.

def compute_d_img_loss(wrong_img_logit, real_img_logit, fake_logit, prob=0.5):
    wrong_d_loss = torch.mean(((wrong_img_logit) - 1) ** 2)
    real_d_loss = torch.mean(((real_img_logit) - 1) ** 2)
    real_img_d_loss = wrong_d_loss * prob + real_d_loss * (1 - prob)
    fake_d_loss = torch.mean(((fake_logit)) ** 2)
    return fake_d_loss + real_img_d_loss

def compute_g_loss(fake_logit):
    return torch.mean(((fake_logit) - 1) ** 2)

def train_gans(dataset, model_name, netG, netD, args):
    img_loss_ratio = 1.0   # the weight of img_loss.
    d_lr, g_lr = args.d_lr, args.g_lr
    tot_epoch = args.maxepoch
    ''' get train and test data sampler '''
    train_sampler = dataset.train.next_batch
    test_sampler = dataset.test.next_batch
    updates_per_epoch = int(dataset.train._num_examples / args.batch_size)
    ''' configure optimizer '''
    optimizerD = optim.Adam(netD.parameters(), lr=d_lr, betas=(0.5, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=g_lr, betas=(0.5, 0.999))
    #-------------init ploters for losses----------------------------#
    d_loss_plot = plot_scalar(name="d_loss", env=model_name, rate=args.display_freq)
    g_loss_plot = plot_scalar(name="g_loss", env=model_name, rate=args.display_freq)
    all_keys = ['output_%d' % s for s in args.sizes]
    g_plot_dict = {k: plot_scalar(name="g_img_loss_" + k, env=model_name, rate=args.display_freq) for k in all_keys}
    d_plot_dict = {k: plot_scalar(name="d_img_loss_" + k, env=model_name, rate=args.display_freq) for k in all_keys}
    #--------Generator noise placeholder used for testing------------#
    z = torch.FloatTensor(args.batch_size, args.noise_dim).normal_(0, 1)
    z = to_device(z, requires_grad=False)
    fixed_images, _, fixed_embeddings, _, _ = test_sampler(args.batch_size, 1)
    fixed_embeddings = to_device(fixed_embeddings)
    fixed_z_list = [to_device(torch.FloatTensor(args.batch_size, args.noise_dim).normal_(0, 1))
                    for _ in range(args.test_sample_num)]
    for epoch in range(1, tot_epoch + 1):
        start_timer = time.time()
        if epoch % args.epoch_decay == 0:
            d_lr, g_lr = d_lr / 2, g_lr / 2
            set_lr(optimizerD, d_lr)
            set_lr(optimizerG, g_lr)
        for it in range(updates_per_epoch):
            netG.train()
            for _ in range(args.ncritic):
                ''' Sample data '''
                images, wrong_images, np_embeddings, _, _ = train_sampler(args.batch_size, args.num_emb)
                embeddings = to_device(np_embeddings, requires_grad=False)
                z.data.normal_(0, 1)
                ''' update D '''
                for p in netD.parameters():
                    p.requires_grad = True
                netD.zero_grad()
                with torch.no_grad():
                    fake_images, _ = netG(embeddings, z)
                discriminator_loss = 0
                for key, _ in fake_images.items():
                    this_img = to_device(images[key])
                    this_wrong = to_device(wrong_images[key])
                    this_fake = Variable(fake_images[key].data)
                    real_dict = netD(this_img, embeddings)
                    wrong_dict = netD(this_wrong, embeddings)
                    fake_dict = netD(this_fake, embeddings)
                    discriminator_loss += compute_d_pair_loss(
                        real_dict['pair_disc'], wrong_dict['pair_disc'], fake_dict['pair_disc'])
                    img_loss = compute_d_img_loss(wrong_dict['local_img_disc'], real_dict['local_img_disc'],
                                                  fake_dict['local_img_disc'], prob=0.5)
                    discriminator_loss += img_loss_ratio * img_loss
                    d_plot_dict[key].plot(to_numpy(img_loss).mean())
                d_loss_val = to_numpy(discriminator_loss).mean()
                discriminator_loss.backward()
                optimizerD.step()
                netD.zero_grad()
                d_loss_plot.plot(d_loss_val)
            ''' update G '''
            for p in netD.parameters():
                p.requires_grad = False  # to avoid computation
            netG.zero_grad()
            z.data.normal_(0, 1)
            fake_images, kl_loss = netG(embeddings, z)
            generator_loss = args.KL_COE * kl_loss
            for key, _ in fake_images.items():
                fake_dict = netD(fake_images[key], embeddings)
                generator_loss += compute_g_loss(fake_dict['pair_disc'])
                img_loss_ = compute_g_loss(fake_dict['local_img_disc'])
                generator_loss += img_loss_ * img_loss_ratio
                g_plot_dict[key].plot(to_numpy(img_loss_).mean())
            generator_loss.backward()
            g_loss_val = to_numpy(generator_loss).mean()
            optimizerG.step()
            netG.zero_grad()
            g_loss_plot.plot(g_loss_val)
            if it % args.verbose_per_iter == 0:
                print('[epoch %d/%d iter %d]: lr = %.6f g_loss = %.5f d_loss= %.5f' %
                      (epoch, tot_epoch, it, g_lr, g_loss_val, d_loss_val))
                sys.stdout.flush()

        # generate and visualize testing results per epoch
        netG.eval()
        vis_samples = {}
        with torch.no_grad():
            for t in range(args.test_sample_num):
                samples, _ = netG(fixed_embeddings, fixed_z_list[t])
                if t == 0:
                    for k in samples.keys():
                        vis_samples[k] = [fixed_images[k]]
                for k, v in samples.items():
                    vis_samples[k].append(to_numpy(v))
        grids = {typ: save_images_list(v) for typ, v in vis_samples.items()}
        end_timer = time.time() - start_timer
        print('epoch {}/{} finished [time = {:.2f}s] grids={} ...'.format(
            epoch, tot_epoch, end_timer, {k: g.shape for k, g in grids.items()}))

DEFAULTS = dict(batch_size=4, num_emb=4, d_lr=0.0002, g_lr=0.0002, display_freq=2, epoch_decay=100,
                maxepoch=2, ncritic=1, test_sample_num=2, KL_COE=4.0, verbose_per_iter=4, noise_dim=16,
                emb_dim=32, gen_hid=16, disc_hid=16, finest_size=32, model_name='HDGAN_32_birds')

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Gans')
    for name, default in DEFAULTS.items():
        parser.add_argument('--' + name, type=type(default), default=default)
    args = parser.parse_args(argv)
    args.sizes = [args.finest_size // 4, args.finest_size // 2, args.finest_size]
    return args

def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    np.random.seed(0)
    args = parse_args([])
    netG = Generator(sent_dim=args.emb_dim, noise_dim=args.noise_dim, emb_dim=128,
                     hid_dim=args.gen_hid, sizes=args.sizes)
    netD = Discriminator(sizes=args.sizes, sent_dim=args.emb_dim, hid_dim=args.disc_hid)
    dataset = DataBundle(args)
    train_gans(dataset, args.model_name, netG, netD, args)

if __name__ == '__main__':
    main()
