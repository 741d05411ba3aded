# expect: clean
# source: https://github.com/rungjoo/Stable-Style-Transformer/issues/9
"""Sentiment style transfer (delete-and-generate) with a transformer encoder-decoder.

A frozen attribute classifier first deletes the most sentiment-bearing tokens of a
review; the encoder reads the remaining tokens and the decoder regenerates the sentence
conditioned on an attribute vector.  Each step has two updates on the same auto-encoder
parameters: a reconstruction update (Adamax, small lr) and a "generated sentence"
update where the classifier scores the decoder's soft vocabulary output (Adamax, larger
lr).  Synthetic yelp-like token ids on CPU; vocabulary shrunk from GPT-2's 50259.
"""
import math
import random
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = SimpleNamespace(n_vocab=60, emb_dim=32, nhead=4, num_layers=2, att_num=2,
                      START_IDX=57, PAD_IDX=58, EOS_IDX=56, max_sent_len=10,
                      aed_initial_lr=1e-5, gen_initial_lr=1e-3, max_grad_norm=20,
                      n_pairs=6, epochs=1, del_threshold=0.7, seed=0)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=64):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))

    def forward(self, x):
        return self.dropout(x + self.pe[:x.size(0), :])


class StyleTransfer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.matrix_A = nn.Linear(cfg.att_num, cfg.emb_dim)
        self.emb_matrix = nn.Embedding(cfg.n_vocab, cfg.emb_dim, cfg.PAD_IDX)
        self.pos_encoder = PositionalEncoding(cfg.emb_dim)
        enc_layer = nn.TransformerEncoderLayer(d_model=cfg.emb_dim, nhead=cfg.nhead, dim_feedforward=64)
        self.transformer_encoder = nn.TransformerEncoder(enc_layer, num_layers=cfg.num_layers, enable_nested_tensor=False)
        dec_layer = nn.TransformerDecoderLayer(d_model=cfg.emb_dim, nhead=cfg.nhead, dim_feedforward=64)
        self.transformer_decoder = nn.TransformerDecoder(dec_layer, num_layers=cfg.num_layers)
        self.matrix_D = nn.Linear(cfg.emb_dim, cfg.n_vocab)
        self.aed_params = (list(self.emb_matrix.parameters()) + list(self.transformer_encoder.parameters())
                           + list(self.transformer_decoder.parameters()) + list(self.matrix_D.parameters()))

    def encoder(self, enc_input):
        word_emb = self.emb_matrix(enc_input).transpose(0, 1)
        return self.transformer_encoder(self.pos_encoder(word_emb))

    def decoder(self, enc_out, dec_input, attribute):
        att_emb = self.matrix_A(attribute).unsqueeze(0)
        word_pos = self.pos_encoder(self.emb_matrix(dec_input).transpose(0, 1))
        start_token = self.emb_matrix(torch.tensor(self.cfg.START_IDX)).repeat(1, dec_input.shape[0], 1)
        style_dec_input = torch.cat([att_emb, start_token, word_pos], 0)
        tgt_mask = self.generate_square_subsequent_mask(style_dec_input.shape[0])
        dec_out = self.transformer_decoder(style_dec_input, enc_out, tgt_mask=tgt_mask)
        vocab_out = self.matrix_D(dec_out)
        return dec_out, vocab_out

    @staticmethod
    def generate_square_subsequent_mask(sz):
        mask = (torch.triu(torch.ones(sz, sz)) == 1).transpose(0, 1)
        return mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, 0.0)

    def recon_loss(self, dec_input, vocab_out):
        end = torch.full((dec_input.shape[0], 1), self.cfg.EOS_IDX, dtype=torch.long)
        target = torch.cat([dec_input, end], 1).transpose(0, 1)
        logits = vocab_out[1:]
        return F.cross_entropy(logits.reshape(-1, self.cfg.n_vocab), target.reshape(-1))

    def cls_loss(self, attributes, cls_out):
        return F.binary_cross_entropy_with_logits(cls_out, attributes)


class FindAttribute(nn.Module):
    """Pre-trained sentiment classifier; also used to delete attribute words."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.word_emb = nn.Embedding(cfg.n_vocab, cfg.emb_dim)
        self.conv = nn.Conv1d(cfg.emb_dim, 16, kernel_size=3, padding=1)
        self.att_score = nn.Linear(cfg.emb_dim, cfg.att_num)
        self.fc = nn.Linear(16, cfg.att_num)

    def _classify(self, emb):
        h = F.relu(self.conv(emb.transpose(1, 2))).max(2)[0]
        return self.fc(h)

    def discriminator(self, token_idx):
        return self._classify(self.word_emb(token_idx))

    def gen_discriminator(self, vocab_out):
        soft = F.softmax(vocab_out.transpose(0, 1), dim=-1)
        return self._classify(soft @ self.word_emb.weight)

    def att_prob(self, token_idx, sentiment):
        scores = self.att_score(self.word_emb(token_idx))[0, :, sentiment]
        drop = scores.argmax().item()
        keep = [i for i in range(token_idx.shape[1]) if i != drop]
        return token_idx[:, keep] if keep else token_idx


def delete_attribute_words(dismodel, token_idx, cfg):
    with torch.no_grad():
        sentiment = dismodel.discriminator(token_idx).argmax(1).item()
        del_idx = token_idx
        for _ in range(int(token_idx.shape[1] / 2)):
            del_idx = dismodel.att_prob(del_idx, sentiment)
            prob = F.softmax(dismodel.discriminator(del_idx), 1).squeeze(0)[sentiment].item()
            if prob < cfg.del_threshold:
                break
    return del_idx


def make_reviews(cfg, rng):
    neg, pos = [], []
    for _ in range(cfg.n_pairs):
        length = rng.randrange(5, cfg.max_sent_len)
        neg.append([rng.randrange(0, 28) for _ in range(length)])
        pos.append([rng.randrange(28, 56) for _ in range(length)])
    return neg, pos


class StyleTrainer:
    def __init__(self, genmodel, dismodel, cfg):
        self.genmodel, self.dismodel, self.cfg = genmodel, dismodel, cfg
        self.aed_trainer = torch.optim.Adamax(genmodel.aed_params, lr=cfg.aed_initial_lr)
        self.gen_trainer = torch.optim.Adamax(genmodel.aed_params, lr=cfg.gen_initial_lr)
        self.summary = {"reconstruction loss": [], "generated sentence loss": []}

    def add_scalar(self, tag, value):
        self.summary[tag].append(value)

    def train_step(self, sentence, attribute):
        genmodel, cfg = self.genmodel, self.cfg
        token_idx = torch.tensor(sentence).unsqueeze(0)
        del_idx = delete_attribute_words(self.dismodel, token_idx, cfg)

        # auto-encoder loss & training
        enc_out = genmodel.encoder(del_idx)
        dec_out, vocab_out = genmodel.decoder(enc_out, token_idx, attribute)
        recon_loss = genmodel.recon_loss(token_idx, vocab_out)
        self.add_scalar("reconstruction loss", recon_loss.item())
        self.aed_trainer.zero_grad()
        recon_loss.backward()
        torch.nn.utils.clip_grad_norm_(genmodel.aed_params, cfg.max_grad_norm)
        self.aed_trainer.step()

        # decoder classification loss & training
        enc_out = genmodel.encoder(del_idx)
        dec_out, vocab_out = genmodel.decoder(enc_out, token_idx, attribute)
        gen_cls_out = self.dismodel.gen_discriminator(vocab_out)
        gen_cls_loss = genmodel.cls_loss(attribute, gen_cls_out)
        self.add_scalar("generated sentence loss", gen_cls_loss.item())
        self.gen_trainer.zero_grad()
        gen_cls_loss.backward()
        torch.nn.utils.clip_grad_norm_(genmodel.aed_params, cfg.max_grad_norm)
        self.gen_trainer.step()
        return recon_loss.item(), gen_cls_loss.item()

    @torch.no_grad()
    def evaluate(self, sentences, attributes):
        self.genmodel.eval()
        accs = []
        for sent, att in zip(sentences, attributes):
            token_idx = torch.tensor(sent).unsqueeze(0)
            enc_out = self.genmodel.encoder(delete_attribute_words(self.dismodel, token_idx, self.cfg))
            _, vocab_out = self.genmodel.decoder(enc_out, token_idx, att)
            pred = self.dismodel.gen_discriminator(vocab_out).argmax(1)
            accs.append(float(pred.item() == att.argmax(1).item()))
        self.genmodel.train()
        return float(np.mean(accs))

    def fit(self, neg_data, pos_data):
        neg_attribute = torch.tensor([[1.0, 0.0]])
        pos_attribute = torch.tensor([[0.0, 1.0]])
        for epoch in range(self.cfg.epochs):
            for start in range(len(pos_data)):
                sentences = [neg_data[start % len(neg_data)], pos_data[start]]
                attributes = [neg_attribute, pos_attribute]
                for i in range(2):
                    self.train_step(sentences[i], attributes[i])
            acc = self.evaluate(pos_data[:3], [neg_attribute] * 3)
            print(f"epoch {epoch}: recon {np.mean(self.summary['reconstruction loss']):.3f} transfer acc {acc:.2f}")


def main():
    cfg = CFG
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    genmodel = StyleTransfer(cfg)
    genmodel.train()
    dismodel = FindAttribute(cfg)
    dismodel.eval()
    neg, pos = make_reviews(cfg, random.Random(cfg.seed))
    trainer = StyleTrainer(genmodel, dismodel, cfg)
    trainer.fit(neg, pos)


if __name__ == "__main__":
    main()
