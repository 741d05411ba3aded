# expect: numpy_requires_grad
# source: https://github.com/jacbz/Lofi/issues/14
"""lofi2lofi training script: a recurrent VAE that encodes a song (chords,
melody, tempo, key, mode, valence, energy) into a latent vector and decodes it
back, with scheduled sampling, per-epoch training/validation statistics and a
2x2 panel of learning curves (rendered as text instead of matplotlib)."""
import math
import random

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

# constants.py
CHORD_PRED = 10
NOTES_PER_CHORD = 4
MELODY_PRED = 16
MAX_CHORD_LENGTH = 8
HIDDEN = 48
LATENT = 16
BATCH_SIZE = 16
NUM_EPOCHS = 3

device = "cpu"


class SongDataset(Dataset):
    def __init__(self, n_songs, seed):
        g = torch.Generator().manual_seed(seed)
        self.num_chords = torch.randint(3, MAX_CHORD_LENGTH + 1, (n_songs,), generator=g)
        self.chords = torch.randint(0, CHORD_PRED, (n_songs, MAX_CHORD_LENGTH + 1), generator=g)
        self.melody = torch.randint(0, MELODY_PRED, (n_songs, (MAX_CHORD_LENGTH + 1) * NOTES_PER_CHORD), generator=g)
        self.bpm = torch.rand(n_songs, generator=g)
        self.key = torch.randint(0, 12, (n_songs,), generator=g)
        self.mode = torch.randint(0, 2, (n_songs,), generator=g)
        self.valence = torch.rand(n_songs, generator=g)
        self.energy = torch.rand(n_songs, generator=g)

    def __len__(self):
        return len(self.bpm)

    def __getitem__(self, i):
        return {"num_chords": self.num_chords[i], "chords": self.chords[i], "melody_notes": self.melody[i],
                "bpm": self.bpm[i], "key": self.key[i], "mode": self.mode[i],
                "valence": self.valence[i], "energy": self.energy[i]}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.chord_emb = nn.Embedding(CHORD_PRED, HIDDEN)
        self.encoder = nn.GRU(HIDDEN, HIDDEN, batch_first=True)
        self.mean = nn.Linear(HIDDEN, LATENT)
        self.logvar = nn.Linear(HIDDEN, LATENT)
        self.z_to_h = nn.Linear(LATENT, HIDDEN)
        self.chord_decoder = nn.GRUCell(HIDDEN, HIDDEN)
        self.chord_out = nn.Linear(HIDDEN, CHORD_PRED)
        self.melody_decoder = nn.GRUCell(HIDDEN + CHORD_PRED, HIDDEN)
        self.melody_out = nn.Linear(HIDDEN, MELODY_PRED)
        self.heads = nn.ModuleDict({"bpm": nn.Linear(LATENT, 1), "key": nn.Linear(LATENT, 12),
                                    "mode": nn.Linear(LATENT, 2), "valence": nn.Linear(LATENT, 1),
                                    "energy": nn.Linear(LATENT, 1)})

    def forward(self, chords_in, max_chords, sampling_rate_chords, sampling_rate_melodies, chords_gt, notes_gt):
        _, h = self.encoder(self.chord_emb(chords_in))
        mu, logvar = self.mean(h[-1]), self.logvar(h[-1])
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar) if self.training else mu
        kl = -0.5 * torch.mean(1 + logvar - mu.pow(2) - logvar.exp())
        hc = self.z_to_h(z)
        prev = torch.zeros_like(hc)
        chord_logits, note_logits = [], []
        hm = hc
        for i in range(max_chords):
            hc = self.chord_decoder(prev, hc)
            logits = self.chord_out(hc)
            chord_logits.append(logits)
            use_gt = self.training and random.random() < sampling_rate_chords
            prev = self.chord_emb(chords_gt[:, i] if use_gt else logits.argmax(-1))
            for j in range(NOTES_PER_CHORD):
                hm = self.melody_decoder(torch.cat([hm, logits.softmax(-1)], -1), hm)
                note_logits.append(self.melody_out(hm))
        return (torch.stack(chord_logits, 1), torch.stack(note_logits, 1), self.heads["bpm"](z),
                self.heads["key"](z), self.heads["mode"](z), self.heads["valence"](z), self.heads["energy"](z), kl)


def compute_loss(data):
    num_chords = data["num_chords"].to(device)
    max_num_chords = int(num_chords.max())
    max_num_notes = max_num_chords * NOTES_PER_CHORD
    chords_gt = data["chords"].to(device)[:, :max_num_chords]
    notes_gt = data["melody_notes"].to(device)[:, :max_num_notes]

    pred_chords, pred_notes, pred_bpm, pred_key, pred_mode, pred_valence, pred_energy, kl = \
        model(chords_gt, max_num_chords, sampling_rate_chords, sampling_rate_melodies, chords_gt, notes_gt)

    def compute_mask(max_length, curr_length):
        arange = torch.arange(max_length, device=device).repeat((chords_gt.shape[0], 1))
        return arange < curr_length[:, None]

    mask_chord = compute_mask(max_num_chords, num_chords)
    loss_chords = torch.masked_select(ce_loss(pred_chords.permute(0, 2, 1), chords_gt), mask_chord).mean()
    mask_melody = compute_mask(max_num_notes, num_chords * NOTES_PER_CHORD)
    loss_melody = torch.masked_select(ce_loss(pred_notes.permute(0, 2, 1), notes_gt), mask_melody).mean()
    loss_kl = kl * 1e-2
    loss_bpm = mae(pred_bpm[:, 0], data["bpm"]) / 5
    loss_key = ce_loss(pred_key, data["key"]).mean() / 30
    loss_mode = ce_loss(pred_mode, data["mode"]).mean() / 10
    loss_valence = mae(pred_valence[:, 0], data["valence"]) / 5
    loss_energy = mae(pred_energy[:, 0], data["energy"]) / 5
    loss_total = loss_chords + loss_kl + loss_melody + loss_bpm + loss_key + loss_mode + loss_energy + loss_valence

    tp_chords = torch.masked_select(pred_chords.argmax(dim=2) == chords_gt, mask_chord).tolist()
    tp_melodies = torch.masked_select(pred_notes.argmax(dim=2) == notes_gt, mask_melody).tolist()
    return loss_total, loss_chords, loss_kl, loss_melody, tp_chords, tp_melodies


def text_panel(title, epochs, train, val):
    train, val = np.asarray(train, dtype=float), np.asarray(val, dtype=float)  # raises
    rows = ["%s" % title] + ["  epoch %d  train %.3f  val %.3f" % (e, t, v) for e, t, v in zip(epochs, train, val)]
    return "\n".join(rows)


if __name__ == '__main__':
    torch.manual_seed(42)
    random.seed(42)
    np.random.seed(42)

    train_dataloader = DataLoader(SongDataset(64, 0), batch_size=BATCH_SIZE, shuffle=True)
    validation_dataloader = DataLoader(SongDataset(32, 1), batch_size=BATCH_SIZE, shuffle=False)
    ce_loss = nn.CrossEntropyLoss(reduction='none')
    mae = nn.L1Loss(reduction='mean')
    model = Model().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)

    epochs = []
    training_losses_chords, training_losses_melodies, training_accuracies_chords = [], [], []
    validation_losses_chords, validation_losses_melodies, validation_accuracies_chords = [], [], []

    for epoch in range(NUM_EPOCHS):
        epochs.append(epoch)
        ep_train_chords, ep_train_melodies, ep_train_tp = [], [], []
        ep_val_chords, ep_val_melodies, ep_val_tp = [], [], []
        sampling_rate_chords = 0.5 * (1 + math.cos((epoch / NUM_EPOCHS) * math.pi))
        sampling_rate_melodies = sampling_rate_chords

        model.train()
        for batch, data in enumerate(train_dataloader):
            loss, loss_chords, kl_loss, loss_melody, batch_tp_chords, _ = compute_loss(data)
            ep_train_chords.append(loss_chords)
            ep_train_melodies.append(loss_melody)
            ep_train_tp.extend(batch_tp_chords)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"\tBatch {batch}:\tLoss {loss.item():.3f} (C: {loss_chords:.3f} + KL: {kl_loss:.3f} + M: {loss_melody:.3f})")

        model.eval()
        for batch, data in enumerate(validation_dataloader):
            with torch.no_grad():
                loss, loss_chords, kl_loss, loss_melody, batch_tp_chords, _ = compute_loss(data)
                ep_val_chords.append(loss_chords)
                ep_val_melodies.append(loss_melody)
                ep_val_tp.extend(batch_tp_chords)

        training_losses_chords.append(sum(ep_train_chords) / len(ep_train_chords))
        training_losses_melodies.append(sum(ep_train_melodies) / len(ep_train_melodies))
        training_accuracies_chords.append(sum(ep_train_tp) / len(ep_train_tp) * 100)
        validation_losses_chords.append(sum(ep_val_chords) / len(ep_val_chords))
        validation_losses_melodies.append(sum(ep_val_melodies) / len(ep_val_melodies))
        validation_accuracies_chords.append(sum(ep_val_tp) / len(ep_val_tp) * 100)

        print(f"Epoch chord loss: {training_losses_chords[-1]:.3f}, melody loss: {training_losses_melodies[-1]:.3f}")
        print(text_panel("Chords loss", epochs, training_losses_chords, validation_losses_chords))
        print(text_panel("Chords accuracy", epochs, training_accuracies_chords, validation_accuracies_chords))
        print(text_panel("Melody loss", epochs, training_losses_melodies, validation_losses_melodies))
